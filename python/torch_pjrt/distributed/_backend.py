"""Registration of the tpu c10d backend with torch.distributed."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from .. import _C
from .._settings import settings

# "tpu_dist" is the name transformers' tensor parallelism asks for on a tpu device.
BACKEND_NAMES = ("tpu", "tpu_dist")


def _make_host(store: dist.Store, rank: int, size: int, timeout: timedelta) -> dist.Backend:
    """The gloo group under the host transport, on its own keys of the store."""
    return dist.ProcessGroupGloo(dist.PrefixStore("torch_pjrt_host/", store), rank, size, timeout)


def _create(opts, pg_options=None) -> dist.Backend:
    """What torch.distributed calls for every process group on the device."""
    timeout = opts.timeout if isinstance(opts.timeout, timedelta) else timedelta(seconds=opts.timeout)
    return _C._distributed.TpuBackend(opts.store, opts.group_rank, opts.group_size, timeout, _make_host)


def register() -> None:
    """Registers the backend names for the device (idempotent)."""
    device = settings().device_name
    for name in BACKEND_NAMES:
        if name.upper() in dist.Backend._plugins:
            continue
        dist.Backend.register_backend(name, _create, extended_api=True, devices=[device])


def transport(group: dist.ProcessGroup | None = None) -> str:
    """'xla' or 'host': how `group` (default: the world) moves tpu tensors."""
    group = group if group is not None else dist.group.WORLD
    if group is None:
        raise RuntimeError("torch.distributed is not initialized")
    return group._get_backend(torch.device(settings().device_name)).transport
