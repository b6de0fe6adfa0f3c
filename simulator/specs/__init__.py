"""Shipped cluster specs (YAML beside this file), after NVIDIA's DGX SuperPOD reference architectures."""

from __future__ import annotations

from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parent


def shipped_specs() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def resolve_spec_path(name_or_path: str) -> Path:
    """A shipped spec's name (``h100-4su``) or a path to a spec file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise FileNotFoundError(f"spec file {path} does not exist")
        return path
    shipped = SPEC_DIR / f"{name_or_path}.yaml"
    if not shipped.exists():
        raise FileNotFoundError(f"no shipped spec {name_or_path!r}; shipped: {', '.join(shipped_specs())}")
    return shipped
