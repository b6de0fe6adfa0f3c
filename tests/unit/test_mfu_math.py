"""MFU math (core/mfu.py) and the twin's workload constants it is checked against."""

from __future__ import annotations

import pytest

from core import mfu
from simulator.dcgm import workloads as wl


def test_hw_flop_utilisation() -> None:
    assert mfu.hw_flop_utilisation(0.62, 1755, 1830) == pytest.approx(0.594590, abs=1e-6)
    assert mfu.hw_flop_utilisation(1.0, 1980, 1830) == pytest.approx(1.081967, abs=1e-6)  # boost above ref
    assert mfu.hw_flop_utilisation(0.0, 345, 1830) == 0.0
    with pytest.raises(ValueError):
        mfu.hw_flop_utilisation(0.5, 1000, 0)


@pytest.mark.parametrize(
    ("profile", "slices", "share"),
    [(None, 7, 1.0), ("3g.40gb", 7, 3 / 7), ("1g.10gb", 7, 1 / 7), ("7g.80gb", 7, 1.0), ("1c.3g.40gb", 7, 3 / 7),
     ("2g.12gb", 4, 0.5), ("1g.10gb+me", 7, 1 / 7)],
)
def test_mig_sm_share(profile: str | None, slices: int, share: float) -> None:
    assert mfu.mig_sm_share(profile, slices) == pytest.approx(share)


def test_mig_sm_share_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a MIG profile"):
        mfu.mig_sm_share("full")


def test_model_mfu() -> None:
    # 8B parameters, 220k tokens/s on 24 H100 SXM at 989 TFLOP/s BF16 dense
    assert mfu.model_mfu(8e9, 220_000, 24 * 989e12) == pytest.approx(0.444894, abs=1e-6)
    with pytest.raises(ValueError):
        mfu.model_mfu(1, 1, 0)


def test_mean_and_measured() -> None:
    assert mfu.mean([0.0, 0.0]) == 0.0  # idle is zero, not unknown
    assert mfu.mean([None, float("nan")]) is None
    assert mfu.measured(1) is False and mfu.measured(2) is True


def test_workloads_are_deterministic_and_zero_mean_over_an_hour() -> None:
    t0 = 1_796_205_600.0
    assert wl.gpu_state(0, 3, t0 + 17) == wl.gpu_state(0, 3, t0 + 17)
    for step in (1, 10, 15, 30):
        tensor = [wl.gpu_state(1, 2, t0 + k * step).instances[0][2].tensor_active for k in range(3600 // step)]
        assert sum(tensor) / len(tensor) == pytest.approx(wl.PRETRAIN["tensor"], abs=1e-9)
    idle = wl.gpu_state(6, 0, t0)
    assert idle.instances[0][2].tensor_active == 0.0 and idle.instances[0][2].pod is None
    mig = wl.gpu_state(5, 0, t0)
    assert [p for p, _, _ in mig.instances] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    assert sum(int(p.split("g.")[0]) for p, _, _ in mig.instances) == 7
