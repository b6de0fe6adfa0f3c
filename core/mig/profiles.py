"""MIG profiles and placement rules per GPU model, as data.

A MIG GPU of the A100 / H100 / H200 generation has 7 compute slices and 8 memory slices. A GPU
instance (GI) profile takes ``compute_slices`` of the first and a contiguous run of
``memory_slices`` of the second, starting at one of the profile's allowed ``starts`` on the
8-wide memory-slice axis (what ``nvidia-smi mig -lgipp`` prints as ``{starts}:size``). A layout is
valid when its memory runs do not overlap, its compute slices add up to at most 7, no profile
exceeds its instance count, and at most one media-extension (``+me``) instance exists
(:mod:`core.mig.layout` checks these).

Sources, per model (profile names and instance counts agree with NVIDIA/mig-parted
``pkg/mig/builder/builder_test.go`` and ``deployments/systemd/config-default.yaml``, which cite
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):

* **H100 80GB**: a real ``nvidia-smi mig -lgip`` / ``-lgipp`` capture of an H100 80GB HBM3
  (``../shared/fixtures/mig/nvidia-smi-mig-lgip-lgipp-h100-80gb-thirdparty.txt``): profile IDs,
  SMs, GiB, instance counts and placements. ``tests/unit/test_mig_profiles.py`` parses that
  capture and the fixtures' profile CSV and compares them with the table here.
* **A100 40GB / 80GB**: the MIG user guide's "Supported MIG Profiles" table (fractions of memory
  and SMs, instance counts; "for A100-SXM4-80GB, the profile names will change according to the
  memory proportion") and its A100 ``-lgip`` / ``-lgipp`` example (profile IDs 19/20/15/14/9/5/0,
  placements {0..6}:1, {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8; GiB 4.75 / 9.75 / 19.62
  for the 1-, 2- and 4-memory-slice profiles of the 40GB part).
* **H100 NVL (94GB)** and **H200 141GB**: the same GH100 slice geometry and placements as the H100
  80GB capture (the user guide's H100 NVL ``-lgipp`` example prints the same placements);
  names and counts from mig-parted. Unverified on hardware here: check with ``-lgipp`` on a real
  part before relying on the profile IDs.

Usable memory (``memory_gib``) is exact where a capture gives it (``memory_source="capture"``)
and otherwise a conservative estimate, 0.95 x the GB in the profile name
(``memory_source="estimate"``): every captured figure we hold is at least that (H100 80GB:
9.75/10, 19.62/20, 39.50/40, 79.25/80; A100 40GB: 4.75/5; H200 3g.71gb: about 69.8 GiB as
reported by torch), so a request sized in GiB is never sent to an instance too small for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

COMPUTE_SLICES = 7
MEMORY_SLICES = 8
ESTIMATE_FACTOR = 0.95  # usable GiB per nominal GB where no capture says (see the module docstring)
PROFILE_NAME_RE = re.compile(r"(?P<compute>[1-8])g\.(?P<gb>\d{1,4})gb(?P<me>\+me)?\Z")


class UnknownModelError(ValueError):
    """A GPU model name that no entry of :data:`MODELS` answers to."""


class UnknownProfileError(ValueError):
    """A profile name the GPU model does not offer."""


@dataclass(frozen=True)
class Profile:
    """One GPU instance profile of one GPU model."""

    name: str  # "1g.10gb", "1g.10gb+me"
    gi_profile_id: int  # the ID nvidia-smi prints (-lgip "ID", -lgipp "Profile ID")
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]  # allowed starts on the memory-slice axis
    max_instances: int
    memory_gib: float
    memory_source: str  # "capture" | "estimate"
    media_extensions: bool = False  # "+me": the GPU's one set of JPEG/OFA engines

    @property
    def nominal_gb(self) -> int:
        match = PROFILE_NAME_RE.match(self.name)
        assert match is not None, self.name
        return int(match.group("gb"))


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model: its profiles (smallest first) and how to recognise it."""

    name: str  # canonical: "H100-80GB"
    profiles: tuple[Profile, ...]
    pci_device_ids: tuple[str, ...]  # as mig-parted's device-filter spells them: "0x233010DE"
    aliases: tuple[str, ...]  # other names seen for it (node labels, NVML names, spec files)
    source: str
    compute_slices: int = COMPUTE_SLICES
    memory_slices: int = MEMORY_SLICES
    max_media_instances: int = 1

    def profile(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise UnknownProfileError(f"{self.name} has no MIG profile {name!r} (it has: {known})")

    def has_profile(self, name: str) -> bool:
        return any(p.name == name for p in self.profiles)

    def index(self, name: str) -> int:
        """Position of a profile in :attr:`profiles`: the axis of every count vector."""
        for i, profile in enumerate(self.profiles):
            if profile.name == name:
                return i
        raise UnknownProfileError(f"{self.name} has no MIG profile {name!r}")

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


# The GA100/GH100 slice geometry every model here shares: (compute, memory slices, starts, count,
# nvidia-smi profile ID, media extensions). Order: the planner's "smallest first".
_GEOMETRY: tuple[tuple[int, int, tuple[int, ...], int, int, bool], ...] = (
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 7, 19, False),  # 1g.<1 slice>
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 1, 20, True),  # 1g.<1 slice>+me
    (1, 2, (0, 2, 4, 6), 4, 15, False),  # 1g.<2 slices>
    (2, 2, (0, 2, 4), 3, 14, False),  # 2g.<2 slices>
    (3, 4, (0, 4), 2, 9, False),  # 3g.<4 slices>
    (4, 4, (0,), 1, 5, False),  # 4g.<4 slices>
    (7, 8, (0,), 1, 0, False),  # 7g.<8 slices>
)


def _model(
    name: str,
    gb_by_memory_slices: Mapping[int, int],
    captured_gib: Mapping[int, float],
    pci_device_ids: Iterable[str],
    aliases: Iterable[str],
    source: str,
) -> GpuModel:
    profiles = []
    for compute, memory, starts, count, gi_id, media in _GEOMETRY:
        gb = gb_by_memory_slices[memory]
        captured = captured_gib.get(memory)
        profiles.append(
            Profile(
                name=f"{compute}g.{gb}gb" + ("+me" if media else ""),
                gi_profile_id=gi_id,
                compute_slices=compute,
                memory_slices=memory,
                starts=starts,
                max_instances=count,
                memory_gib=captured if captured is not None else round(ESTIMATE_FACTOR * gb, 2),
                memory_source="capture" if captured is not None else "estimate",
                media_extensions=media,
            )
        )
    return GpuModel(name, tuple(profiles), tuple(pci_device_ids), tuple(aliases), source)


_GUIDE = "NVIDIA MIG user guide, Supported MIG Profiles (A100 table and -lgipp example); mig-parted"
_GH100_ASSUMED = "mig-parted names/counts; placements as the H100 80GB capture (same GH100 geometry, unverified)"

# PCI device IDs: the device-filter groups of mig-parted's config-default.yaml, whose comments
# name the parts ("A100-40GB, A800-40GB", "H100 NVL, H800 NVL", "H200 141GB, H200 NVL"...).
MODELS: tuple[GpuModel, ...] = (
    _model(
        "A100-40GB",
        {1: 5, 2: 10, 4: 20, 8: 40},
        {1: 4.75, 2: 9.75, 4: 19.62},
        ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
        ("A100-SXM4-40GB", "A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        _GUIDE,
    ),
    _model(
        "A100-80GB",
        {1: 10, 2: 20, 4: 40, 8: 80},
        {},
        ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
        ("A100-SXM4-80GB", "A100-PCIE-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
        _GUIDE,
    ),
    _model(
        "H100-80GB",
        {1: 10, 2: 20, 4: 40, 8: 80},
        {1: 9.75, 2: 19.62, 4: 39.50, 8: 79.25},
        ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
        ("H100-SXM5-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", "H100-PCIE-80GB", "NVIDIA H100 PCIe"),
        "real nvidia-smi mig -lgip/-lgipp capture of an H100 80GB HBM3 (fixtures); mig-parted",
    ),
    _model(
        "H100-94GB",
        {1: 12, 2: 24, 4: 47, 8: 94},
        {},
        ("0x232110DE", "0x233A10DE"),
        ("H100-NVL", "H100-NVL-94GB", "NVIDIA H100 NVL", "NVIDIA-H100-NVL"),
        _GH100_ASSUMED,
    ),
    _model(
        "H200-141GB",
        {1: 18, 2: 35, 4: 71, 8: 141},
        {},
        ("0x233510DE", "0x233B10DE"),
        ("H200-SXM-141GB", "NVIDIA H200", "NVIDIA-H200", "H200-NVL", "NVIDIA H200 NVL"),
        _GH100_ASSUMED,
    ),
)


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip()).upper()


@cache
def _by_key() -> dict[str, GpuModel]:
    table: dict[str, GpuModel] = {}
    for model in MODELS:
        for name in (model.name, *model.aliases):
            table[_key(name)] = model
    return table


def model_named(name: str) -> GpuModel:
    """The model a name stands for: canonical (``H100-80GB``), a node label value
    (``NVIDIA-H100-80GB-HBM3``), an NVML name (``NVIDIA H100 80GB HBM3``) or a spec's name."""
    model = _by_key().get(_key(name)) if isinstance(name, str) else None
    if model is None:
        known = ", ".join(m.name for m in MODELS)
        raise UnknownModelError(f"unknown GPU model {name!r} (modelled: {known})")
    return model


def models_for_device_id(device_id: str) -> tuple[GpuModel, ...]:
    """Models a mig-parted device-filter entry (``0x233010DE``, any case) selects."""
    wanted = device_id.strip().upper().replace("0X", "0x", 1)
    return tuple(m for m in MODELS if wanted in m.pci_device_ids)


def models_with_profiles(names: Iterable[str]) -> tuple[GpuModel, ...]:
    """Models that offer every profile named (how a config without a device-filter is checked)."""
    wanted = set(names)
    return tuple(m for m in MODELS if wanted <= set(m.profile_names))
