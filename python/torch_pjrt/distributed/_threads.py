"""Ranks as threads: N ranks of one process group in one process, one device
each, with unchanged torch.distributed code in every thread.

torch.distributed keeps its groups in one module-level world; `run_threads`
gives each thread its own world (and turns on torch's per-thread registry of
group names), so each thread can call `dist.init_process_group` as if it
were a process. Groups whose ranks all live here use the XLA transport:
collectives are XLA programs launched once across the ranks' devices.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


class _ThreadWorlds:
    """Stands in for `distributed_c10d._world`: every thread sees its own."""

    def __init__(self) -> None:
        object.__setattr__(self, "_local", threading.local())

    def _mine(self) -> SimpleNamespace:
        world = getattr(self._local, "world", None)
        if world is None:
            world = SimpleNamespace(
                default_pg=None, pg_map={}, pg_names={}, pg_group_ranks={}, pg_backend_config={},
                group_count=0, tags_to_pg={}, pg_to_tag={}, pg_coalesce_state={}, comms=[],
            )
            self._local.world = world
        return world

    def __getattr__(self, name: str) -> Any:
        if name == "pg_config_info":
            return c10d._World.pg_config_info.fget(self)  # type: ignore[attr-defined]
        return getattr(self._mine(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._mine(), name, value)


_install_lock = threading.Lock()


@contextlib.contextmanager
def _threaded_world():
    with _install_lock:
        previous = c10d._world
        c10d._world = _ThreadWorlds()
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        # The autograd engine would run a rank's backward on a device thread
        # that does not see the rank's groups.
        multithreading = torch.autograd.set_multithreading_enabled(False)
        # DTensor's sharding propagation enters a FakeTensorMode; torch asks
        # threaded runs to serialize it.
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        fake_lock = ShardingPropagator._fake_mode_lock
        ShardingPropagator._fake_mode_lock = threading.Lock()
        # Fake tensors made on device "tpu" take the current device of the
        # thread that makes them; the fake-tensor cache, one per process,
        # would hand one rank's device to another.
        import torch._dynamo.config as dynamo_config

        # torch's config values are per thread (context variables), and
        # DTensor's C++ dispatch calls back into Python in a fresh context:
        # the process-wide default must change, not only this thread's value.
        fake_cache = dynamo_config.fake_tensor_cache_enabled
        dynamo_config.fake_tensor_cache_enabled = False
        entry = getattr(dynamo_config, "_config", {}).get("fake_tensor_cache_enabled")
        fake_default = entry.default if entry is not None else None
        if entry is not None:
            entry.default = False
    try:
        yield
    finally:
        with _install_lock:
            ShardingPropagator._fake_mode_lock = fake_lock
            dynamo_config.fake_tensor_cache_enabled = fake_cache
            if entry is not None:
                entry.default = fake_default
            multithreading.__exit__(None, None, None)
            torch._C._distributed_c10d._set_thread_isolation_mode(False)
            c10d._world = previous


def run_threads(
    fn: Callable[[int], Any],
    world_size: int,
    *,
    backend: str = "tpu",
    timeout: timedelta = timedelta(minutes=5),
    init: bool = True,
) -> list[Any]:
    """Runs `fn(rank)` in `world_size` threads, rank r on device r, and
    returns their results in rank order.

    With `init` (the default) each thread first calls
    `dist.init_process_group(backend, rank=r, world_size=world_size)` on a
    shared in-memory store, and destroys its groups when `fn` returns. An
    exception in any rank is raised here, naming the rank, after every
    thread has finished (the others fail by timeout if they wait for it);
    the first rank to fail is the one reported.
    """
    devices = torch.tpu.device_count()
    if world_size > devices:
        raise ValueError(
            f"run_threads: {world_size} ranks need {world_size} devices, but {devices} are "
            f"available (set TORCH_PJRT_CPU_DEVICES={world_size} for the CPU plugin)"
        )
    store = dist.HashStore()
    results: list[Any] = [None] * world_size
    errors: list[tuple[int, BaseException, str]] = []

    def body(rank: int) -> None:
        try:
            torch.tpu.set_device(rank)
            if init:
                dist.init_process_group(backend, rank=rank, world_size=world_size, store=store,
                                        timeout=timeout)
            try:
                results[rank] = fn(rank)
            finally:
                if init and dist.is_initialized():
                    dist.destroy_process_group()
        except BaseException as error:  # reported to the caller below
            errors.append((rank, error, traceback.format_exc()))

    with _threaded_world():
        threads = [threading.Thread(target=body, args=(r,), name=f"rank{r}") for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        rank, error, _ = errors[0]
        error.add_note(f"raised by rank {rank} of {world_size} (torch_pjrt.distributed.run_threads)")
        raise error
    return results
