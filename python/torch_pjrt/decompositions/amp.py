"""GradScaler's two ops, which torch implements per backend (CUDA and CPU
kernels) and has no decomposition for: written here in aten ops, so an AMP
training loop on tpu runs them on the device instead of on the CPU with
copies of every gradient both ways.

Both follow the CUDA kernels' rules:
- `_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)`
  multiplies every gradient by inv_scale and sets found_inf to 1 when any
  of them held an inf or NaN (it never sets it back to 0);
- `_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor,
  backoff_factor, growth_interval)` backs the scale off and resets the
  tracker after an inf; otherwise counts a good step, and on the
  growth_interval-th grows the scale (if the grown scale is finite) and
  resets the count.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    if not grads:
        return None
    bad = torch.stack([torch.logical_not(torch.isfinite(g)).any() for g in grads]).any()
    for g in grads:
        g.mul_(inv_scale)
    found_inf.copy_(torch.where(bad, torch.ones_like(found_inf), found_inf))
    return None


def update_scale_(scale, growth_tracker, found_inf, growth_factor: float, backoff_factor: float,
                  growth_interval: int):
    found = found_inf != 0
    successful = growth_tracker + 1
    grow = torch.logical_and(torch.logical_not(found), successful == growth_interval)
    grown = scale * growth_factor
    kept = torch.where(torch.logical_and(grow, torch.isfinite(grown)), grown, scale)
    scale.copy_(torch.where(found, scale * backoff_factor, kept))
    growth_tracker.copy_(torch.where(torch.logical_or(found, grow),
                                     torch.zeros_like(growth_tracker), successful))
    return scale


DECOMPOSITIONS = {
    _aten._amp_foreach_non_finite_check_and_unscale_.default: non_finite_check_and_unscale_,
    _aten._amp_update_scale_.default: update_scale_,
}
