"""generate() on tpu decides to stop one step late, so the host never waits
for the device between tokens.

Transformers' decoding loop asks after every token whether all sequences
are done (`unfinished_sequences.max() == 0`), which is a host sync: the host
waits for the step's program to finish before it can record or launch the
next one. Its `DeferredStopCheck` instead copies that flag to pinned host
memory without waiting, records a `torch.Event` behind the copy, and reads
the flag one step later, once the event says the copy is done; the one
extra forward pass this runs is undone by generate (its token dropped, a
croppable cache rolled back). Transformers enables it only for "mps".

On tpu the pieces it needs are real: a non-blocking copy into pinned memory
returns before the copy is done, and a torch.Event waits for the work
launched before it was recorded, not for later work (see
backend/copy.cc and eager/device_events.h). So the host records token t+1's
ops, or launches its program, while the device computes token t. This
module enables the deferred check for tpu under the same conditions
Transformers sets for mps (not for an assistant model; a cache that is
returned must be croppable), and puts its two slots of flags and tokens in
pinned memory (Transformers pins them for CUDA only), which makes the copy
asynchronous here. Nothing changes which tokens come out
(tests/test_deferred_stop_check.py compares them with the CPU's, with and
without an end-of-sequence token).
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from ._import_hooks import when_imported

_PATCHED = "_torch_pjrt_deferred_stop_check"


def _device_name() -> str:
    return torch._C._get_privateuse1_backend_name()


def install_on(module: Any) -> None:
    cls = getattr(module, "DeferredStopCheck", None)
    if cls is None or getattr(cls, _PATCHED, False):
        return  # an older transformers without it, or already patched
    original_supported = cls.is_supported
    original_init = cls.__init__

    def is_supported(device: torch.device, cache, cache_is_returned: bool,
                     is_assistant: bool) -> bool:
        if device.type != _device_name():
            return original_supported(device, cache, cache_is_returned, is_assistant)
        if is_assistant:
            return False
        return cache is None or cache.is_croppable or not cache_is_returned

    def __init__(self, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        original_init(self, input_ids, *args, **kwargs)
        if input_ids.device.type == _device_name():
            self.slots = collections.deque(
                (flag.pin_memory(), tokens.pin_memory(), event)
                for flag, tokens, event in self.slots)

    cls.is_supported = staticmethod(is_supported)
    cls.__init__ = __init__
    setattr(cls, _PATCHED, True)


def install() -> None:
    when_imported("transformers.generation.utils", install_on)
