"""Model FLOP Utilisation math: the reference implementation of what the efficiency marts compute.

Two estimates, because SM utilisation alone does not prove a GPU did useful work:

* **Hardware-estimated FLOP utilisation** from DCGM profiling counters: the tensor pipe was busy
  ``tensor_active`` of the cycles, at ``sm_clock`` MHz, while the datasheet peak is quoted at
  ``ref_clock`` MHz, so the tensor FLOP rate achieved is about
  ``tensor_active * sm_clock / ref_clock * peak``. Under MIG, DCGM reports the ratios of the
  instance's own SMs, and the instance's peak is the GPU's times its share of compute slices.
* **Model MFU** from what the workload reports: a dense transformer does ``6 * N`` FLOPs per
  token in training (forward 2N + backward 4N, Kaplan et al. 2020 / PaLM appendix B), so
  ``6 * N * tokens_per_s / peak_of_its_gpus``.

The SQL in ``dbt/models/marts/efficiency`` computes the same; tests compare the two.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

_PROFILE_RE = re.compile(r"(\d+)g\.")
TRAINING_FLOPS_PER_PARAM_TOKEN = 6.0


def hw_flop_utilisation(tensor_active: float, sm_clock_mhz: float, ref_clock_mhz: float) -> float:
    """Share of the datasheet tensor peak achieved at one instant (may exceed 1 above the ref clock)."""
    if ref_clock_mhz <= 0:
        raise ValueError("reference clock must be positive")
    return tensor_active * sm_clock_mhz / ref_clock_mhz


def mig_sm_share(profile: str | None, slices: int = 7) -> float:
    """Compute share of a MIG GPU instance: ``3g.40gb`` on a 7-slice GPU is 3/7; no profile is 1.

    ``1c.3g.40gb`` (a compute instance inside a 3g GPU instance) takes the GPU instance's share,
    which is what dcgm-exporter's GPU_I_PROFILE names.
    """
    if not profile:
        return 1.0
    match = _PROFILE_RE.search(profile)
    if match is None:
        raise ValueError(f"not a MIG profile: {profile!r}")
    return int(match.group(1)) / slices


def model_mfu(parameters: float, tokens_per_s: float, peak_flops: float) -> float:
    """6·N·tokens/s over the peak FLOP/s of the GPUs doing the work."""
    if peak_flops <= 0:
        raise ValueError("peak FLOP/s must be positive")
    return TRAINING_FLOPS_PER_PARAM_TOKEN * parameters * tokens_per_s / peak_flops


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-NULL values; None when there are none (unmeasured, not zero)."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    return sum(present) / len(present) if present else None


def measured(sample_count: int) -> bool:
    """A window is measured when it holds at least two scrape intervals of samples: one sample
    alone could be a transient, and it gives no interval to weight it by."""
    return sample_count >= 2
