"""Runs torchtitan 0.3.0's trainer on the tpu device (or on the CPU with
gloo, for comparison), with the smallest set of changes that torch 2.13 and
torchtitan 0.3.0 need. Each change is named in docs/DISTRIBUTED.md
("TorchTitan") with what breaks without it:

1. torchtitan compiles `flex_attention` and `create_block_mask` with
   torch.compile's default backend, inductor. For device "tpu", inductor in
   torch 2.13 generates Pallas kernels, which need jax and a real TPU. Here
   both run eagerly instead (the same math as torch's reference path).
2. torch 2.13's flex_attention refuses every device but CUDA, CPU, HPU and
   MPS, and refuses a CPU backward. Its check is widened to "tpu" and to
   the CPU backward; eager flex_attention is built from ordinary aten ops.
3. torchtitan 0.3.0 calls `torch.distributed.set_timeout`, which torch 2.13
   does not have; it is defined over ProcessGroup.set_timeout.
4. Only with --cpu: torchtitan has no CPU device (it falls back to "cuda"),
   so a small stand-in device module is given; and torchtitan asks FSDP2 for
   a gradient divide factor of 1, which FSDP2 sends as ReduceOp.PREMUL_SUM,
   which gloo refuses: on the CPU FSDP2 is told to reduce with SUM, as it
   does for MTIA (the same numbers: the factor is 1).

Usage (what `make torchtitan` runs):
    torchrun --nproc-per-node 2 examples/torchtitan/launch.py [--cpu] -- <torchtitan args>
"""

from __future__ import annotations

import sys
import types

import torch
import torch.distributed as dist


def cpu_device_module() -> types.ModuleType:
    module = types.ModuleType("cpu_device_for_torchtitan")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(module, name, getattr(torch.cpu, name))
    module.get_device_name = lambda *a: "cpu"
    module.get_device_properties = lambda *a: types.SimpleNamespace(name="cpu", total_memory=16 << 30)
    module.set_device = lambda *a: None
    module.current_device = lambda: 0
    module.device_count = lambda: 1
    module.empty_cache = lambda: None
    module.reset_peak_memory_stats = lambda *a: None
    module.memory_stats = lambda *a: {"active_bytes.all.peak": 0, "reserved_bytes.all.peak": 0,
                                      "num_alloc_retries": 0, "num_ooms": 0}
    module.synchronize = lambda *a: None
    return module


def main() -> None:
    args = sys.argv[1:]
    on_cpu = "--cpu" in args[: args.index("--")] if "--" in args else "--cpu" in args
    if "--" in args:
        args = args[args.index("--") + 1:]
    else:
        args = [a for a in args if a != "--cpu"]
    if on_cpu:
        import torchtitan.tools.utils as tt_utils
        tt_utils.device_type, tt_utils.device_module = "cpu", cpu_device_module()
        from torch.distributed.fsdp._fully_shard import _fsdp_collectives
        factors = _fsdp_collectives._get_gradient_divide_factors

        def sum_only_factors(group, all_reduce_group, reduce_dtype, device_type="",
                             factor=None, force_sum_reduction_for_comms=False):
            return factors(group, all_reduce_group, reduce_dtype, device_type, factor, True)

        _fsdp_collectives._get_gradient_divide_factors = sum_only_factors
    else:
        # Before torchtitan is imported: it picks its device type at import.
        import torch_pjrt  # noqa: F401

    import torch.nn.attention.flex_attention as flex  # (2)
    check = flex._validate_device

    def validate_device(query, key, value):
        if query.device.type in ("tpu", "cpu"):
            return
        check(query, key, value)

    flex._validate_device = validate_device

    import torchtitan.models.common.attention as attention  # (1)
    attention._compiled_create_block_mask = flex.create_block_mask
    attention.FlexAttention._compiled_flex_attn = staticmethod(flex.flex_attention)

    if not hasattr(dist, "set_timeout"):  # (3)
        def set_timeout(timeout, group=None):
            (group or dist.distributed_c10d._get_default_group()).set_timeout(timeout)
        dist.set_timeout = set_timeout

    from torchtitan.train import main as train
    sys.argv = [sys.argv[0], *args]
    train()


if __name__ == "__main__":
    main()
