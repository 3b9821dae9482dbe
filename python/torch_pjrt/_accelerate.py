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
still wins, and `ACCELERATE_TORCH_DEVICE` still overrides everything. 
It also wraps `accelerate.utils.modeling.get_max_memory`: asked without a
budget (`device_map="auto"` alone), accelerate probes only the device kinds
it knows and would place a whole model on the CPU; the wrapper answers each
device of this backend's free memory (`torch.<device>.mem_get_info`) and the
CPU's. Budgets given as `max_memory={0: "2GiB", 1: ...}` are checked against
this backend's devices (accelerate checks integer keys against torch.cuda
and would warn that device 0 is not available); an integer key is
`torch.device(i)`, the current accelerator's device i. And accelerate's enum
of Dynamo backends gains "TPU", so `TrainingArguments(torch_compile=True,
torch_compile_backend="tpu")` reaches `torch.compile(backend="tpu")`.

The patches are applied when their modules are first imported (or at once if
they already are), so importing torch_pjrt does not import accelerate.
"""

from __future__ import annotations

import sys

import torch

from ._import_hooks import when_imported

_STATE = "accelerate.state"
_MODELING = "accelerate.utils.modeling"
_DATACLASSES = "accelerate.utils.dataclasses"
_TARGETS = (_STATE, _MODELING, _DATACLASSES)


def _ours(device_name: str) -> bool:
    current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return current is not None and current.type == device_name


def _patch_max_memory(module, device_name: str) -> None:
    original = getattr(module, "get_max_memory", None)
    if original is None or getattr(original, "_torch_pjrt", False):
        return

    def get_max_memory(max_memory=None):
        if not _ours(device_name):
            return original(max_memory)
        if max_memory is not None:
            # Budgets for devices by index: accelerate would check the
            # indices against torch.cuda and warn "Device 0 is not available".
            # Sizes are converted in the caller's dict, as accelerate does
            # (transformers reads them back from it).
            for key, value in max_memory.items():
                if isinstance(value, str):
                    max_memory[key] = module.convert_file_size_to_int(value)
            device_count = getattr(torch, device_name).device_count()
            indexed = sorted(k for k in max_memory if isinstance(k, int))
            for index in indexed:
                if not 0 <= index < device_count:
                    module.logger.warning(f"Device {index} is not available, available devices are "
                                          f"{list(range(device_count))}")
            named = original({k: v for k, v in max_memory.items() if not isinstance(k, int)})
            return {**{index: max_memory[index] for index in indexed}, **named}
        import psutil

        device_module = getattr(torch, device_name)
        found = {i: device_module.mem_get_info(i)[0] for i in range(device_module.device_count())}
        found["cpu"] = psutil.virtual_memory().available
        return found

    get_max_memory._torch_pjrt = True  # type: ignore[attr-defined]
    get_max_memory.__doc__ = original.__doc__
    get_max_memory.__wrapped__ = original  # type: ignore[attr-defined]
    module.get_max_memory = get_max_memory
    # Modules that imported the name before the patch hold the original.
    for name, attr in (("accelerate.utils", "get_max_memory"),
                       ("transformers.integrations.accelerate", "accelerate_max_memory")):
        other = sys.modules.get(name)
        if other is not None and getattr(other, attr, None) is original:
            setattr(other, attr, get_max_memory)


def _add_dynamo_backend(module) -> None:
    """accelerate checks a Trainer's `torch_compile_backend` against a fixed
    enum of Dynamo backends (`DynamoBackend("TPU")` raises ValueError), then
    calls `torch.compile(model, backend=value.lower())`. The enum gains a
    member for this package's backend, registered with Dynamo as "tpu"."""
    cls = getattr(module, "DynamoBackend", None)
    if cls is None or "TPU" in cls._value2member_map_:
        return
    member = str.__new__(cls, "TPU")
    member._name_ = member._value_ = "TPU"
    cls._member_map_["TPU"] = member
    cls._value2member_map_["TPU"] = member
    cls._member_names_.append("TPU")


def _patch(module, device_name: str) -> None:
    if module.__name__ == _MODELING:
        _patch_max_memory(module, device_name)
        return
    if module.__name__ == _DATACLASSES:
        _add_dynamo_backend(module)
        return
    cls = getattr(module, "PartialState", None)
    prop = getattr(cls, "default_device", None) if cls is not None else None
    if not isinstance(prop, property) or getattr(prop.fget, "_torch_pjrt", False):
        return
    original = prop.fget

    def default_device(self) -> torch.device:
        device = original(self)
        if device.type == "cpu" and _ours(device_name):
            return torch.device(device_name, torch.accelerator.current_device_index())
        return device

    default_device._torch_pjrt = True  # type: ignore[attr-defined]
    default_device.__doc__ = original.__doc__
    cls.default_device = property(default_device)


def install(device_name: str) -> None:
    for target in _TARGETS:
        when_imported(target, lambda module: _patch(module, device_name))
