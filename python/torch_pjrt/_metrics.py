"""torch_pjrt.metrics(): the one dict of counters, with DESIGN.md's names."""

from __future__ import annotations

from typing import Any

from . import _C, decompositions


def metrics() -> dict[str, Any]:
    counters = _C._counters()
    result: dict[str, Any] = {
        "compilations": counters.get("compilations", 0),
        "cache_hits_memory": counters.get("cache_hits_memory", 0),
        "cache_hits_disk": counters.get("cache_hits_disk", 0),
        "executions": counters.get("executions", 0),
        "fallback_ops": dict(counters.get("fallback_ops", {})),
        # Ops with no lowering run on tpu through torch's decompositions.
        "decomposed_ops": decompositions.decomposed_counts(),
        "host_to_device_bytes": counters.get("host_to_device_bytes", 0),
        "device_to_host_bytes": counters.get("device_to_host_bytes", 0),
        "device_to_device_bytes": counters.get("device_to_device_bytes", 0),
        # torch.distributed calls on tpu tensors: name -> count, and bytes sent.
        "collectives": dict(_C._distributed.counters()["calls"]),
        "collective_bytes": _C._distributed.counters()["bytes"],
        "recompile_reasons": dict(counters.get("recompile_reasons", {})),
        "host_syncs": counters.get("host_syncs", 0),
        "compile_seconds": counters.get("compile_seconds", 0.0),
        # Programs whose executables were dropped, least recently used first,
        # because the process neared the kernel's limit on memory mappings.
        "programs_released": counters.get("programs_released", 0),
        "cache_disk_rejects": counters.get("cache_disk_rejects", 0),
        # Within torch_pjrt.runtime.timeline(): device time running programs,
        # and the gaps between one program's end and the next one's launch.
        "device_busy_seconds": counters.get("device_busy_seconds", 0.0),
        "device_idle_seconds": counters.get("device_idle_seconds", 0.0),
        "timeline_programs": counters.get("timeline_programs", 0),
        # Fused eager: launches recorded into pending graphs, the graphs run
        # and compiled, and what made each graph run (why -> count).
        "fused_ops_recorded": counters.get("fused_ops_recorded", 0),
        "fused_graphs_run": counters.get("fused_graphs_run", 0),
        "fused_graphs_compiled": counters.get("fused_graphs_compiled", 0),
        "fused_values_materialized": counters.get("fused_values_materialized", 0),
        "fused_flushes": dict(counters.get("fused_flushes", {})),
    }
    # torch.compile(backend="tpu"): graphs received, programs compiled for
    # them, calls, and nodes split out to run eagerly (no lowering).
    from ._compile.records import compile_counters

    result.update({f"compile_{k}": v for k, v in compile_counters().items()})
    return result


def reset_metrics() -> None:
    from ._compile.records import reset_compile_counters

    _C._reset_counters()
    decompositions.reset_counts()
    _C._distributed.reset_counters()
    reset_compile_counters()
