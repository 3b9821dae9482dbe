"""torch_pjrt's layers for Hugging Face Kernels (the `kernels` package), with
no hub: a local mapping from the layer names Transformers decorates with
`use_kernel_forward_from_hub` to layers in this package.

    from torch_pjrt.kernels import hub
    model = AutoModelForCausalLM.from_config(cfg).to("tpu")
    hub.kernelize(model)                 # RMSNorm forwards -> torch_pjrt.kernels.rms_norm

`kernels` already knows the device type "tpu" (kernels 0.18: kernelize's
device check and its per-device repositories both accept it), so nothing
here patches it: a repository is any object with `layer_name` and
`load()`, and `mapping()` hands kernels one per layer. Transformers 5.23
uses kernels >= 0.18.2, < 0.19 (requirements/kernels.txt pins 0.18.3).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["LocalLayer", "mapping", "kernelize", "use_torch_pjrt_kernels"]


@dataclass(frozen=True)
class LocalLayer:
    """A kernels repository that is a class in this process."""
    layer_name: str
    module: str
    attribute: str

    def load(self) -> type:
        import importlib
        return getattr(importlib.import_module(self.module), self.attribute)


def mapping(device: str = "tpu") -> dict:
    """{layer name: {device: repository}} for kernels' use_kernel_mapping."""
    rms = LocalLayer("RMSNorm", "torch_pjrt.kernels.rms_norm", "RMSNorm")
    return {"RMSNorm": {device: rms}}


def _kernels():
    try:
        import kernels
    except ImportError as e:
        raise ImportError("torch_pjrt.kernels.hub needs Hugging Face Kernels: pip install "
                          "kernels==0.18.3 (the version Transformers 5.23 accepts)") from e
    return kernels


def use_torch_pjrt_kernels(device: str = "tpu", inherit_mapping: bool = True):
    """A context in which kernels' kernelize() picks torch_pjrt's layers."""
    return _kernels().use_kernel_mapping(mapping(device), inherit_mapping=inherit_mapping)


def kernelize(model: torch.nn.Module, *, mode=None, device: Optional[str] = None) -> torch.nn.Module:
    """kernels.kernelize(model) with torch_pjrt's mapping; inference mode
    unless `mode` says otherwise (kernels.Mode.TRAINING keeps gradients)."""
    k = _kernels()
    device = device or next(model.parameters()).device.type
    with use_torch_pjrt_kernels(device):
        return k.kernelize(model, mode=mode if mode is not None else k.Mode.INFERENCE,
                           device=device)
