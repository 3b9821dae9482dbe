"""Teaches Hugging Face accelerate which device to use.

accelerate chooses its default device from a fixed list (MPS, CUDA, XPU,
NPU, ...) and knows no PrivateUse1 backends, so on a machine with only this
device it answers "cpu". transformers, on the other hand, places a Trainer's
model on the current `torch.accelerator` device, which is ours: the Trainer's
data loader would then deliver CPU batches to a model on the device.

`install` wraps `accelerate.state.PartialState.default_device` so that,
where accelerate would fall back to the CPU, it answers the current device
of this backend. It patches nothing else: `cpu=True` (the Trainer's
`use_cpu`) still selects the CPU, any device accelerate recognises first
still wins, and `ACCELERATE_TORCH_DEVICE` still overrides everything. The
patch is applied when `accelerate.state` is first imported (or at once if it
already is), so importing torch_pjrt does not import accelerate.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Optional

import torch

_TARGET = "accelerate.state"


def _patch(module, device_name: str) -> None:
    cls = getattr(module, "PartialState", None)
    prop = getattr(cls, "default_device", None) if cls is not None else None
    if not isinstance(prop, property) or getattr(prop.fget, "_torch_pjrt", False):
        return
    original = prop.fget

    def default_device(self) -> torch.device:
        device = original(self)
        if device.type == "cpu" and torch.accelerator.is_available():
            current = torch.accelerator.current_accelerator()
            if current is not None and current.type == device_name:
                return torch.device(device_name, torch.accelerator.current_device_index())
        return device

    default_device._torch_pjrt = True  # type: ignore[attr-defined]
    default_device.__doc__ = original.__doc__
    cls.default_device = property(default_device)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, device_name: str) -> None:
        self._inner = inner
        self._device_name = device_name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        _patch(module, self._device_name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, device_name: str) -> None:
        self._device_name = device_name

    def find_spec(self, fullname: str, path, target=None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self._device_name)
                return spec
        return None


def install(device_name: str) -> None:
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET], device_name)
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(device_name))
