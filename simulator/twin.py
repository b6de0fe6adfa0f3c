"""What every twin is: a name and a start function returning a :class:`TwinRun`.

Kept apart from ``simulator.up`` so each twin module can import these types at the top without
an import cycle (``up`` imports every twin module to build its registry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.generator import GroundTruth


@dataclass
class TwinRun:
    """What a started twin reports back."""

    name: str
    sources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # merged into gpufabric.yaml sources
    pids: list[int] = field(default_factory=list)  # detached processes to stop on `sim down`
    summary: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a twin's port, for tests


@dataclass(frozen=True)
class Twin:
    """A twin: a name and a function that starts it for a ground truth in a work directory."""

    name: str
    start: Callable[[GroundTruth, Path], TwinRun]
