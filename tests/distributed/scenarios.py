"""Distributed scenarios, run unchanged by every rank: under torchrun (ranks
as processes: the host transport) or torch_pjrt.distributed.run_threads
(ranks as threads: the XLA transport).

    torchrun --nproc-per-node 2 tests/distributed/scenarios.py OUT_DIR ddp fsdp ...

Each scenario returns what the tests compare (losses, parameter sums,
values); rank 0 writes them to OUT_DIR/results.json, one entry per scenario,
or the error a scenario raised.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload  # noqa: E402

SCENARIOS: dict[str, Callable[..., Any]] = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def mean(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    return x


def param_sums(model) -> list[float]:
    from torch.distributed.tensor import DTensor

    out = []
    for _, p in sorted(model.named_parameters()):
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out.append(float(t.detach().double().sum().item()))
    return out


def run_training(model, ctx, **kw):
    late: list[int] = []
    losses = workload.train(model, ctx["device"], mean_loss=mean, barrier=dist.barrier,
                            late_compiles=late, **kw)
    return {"losses": losses, "params": param_sums(model), "late_compiles": late[0]}


# --- data parallel ----------------------------------------------------------------


@scenario
def ddp(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(workload.tiny_llama().to(ctx["device"]))
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


@scenario
def ddp_no_sync(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(workload.tiny_llama().to(ctx["device"]))
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]), accumulate=2,
                        no_sync=model.no_sync)


def fully_shard_llama(model, **kw):
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


@scenario
def fsdp(ctx):
    model = fully_shard_llama(workload.tiny_llama().to(ctx["device"]))
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


@scenario
def fsdp_mixed_precision(ctx):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = fully_shard_llama(workload.tiny_llama().to(ctx["device"]), mp_policy=policy)
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


@scenario
def fsdp_meta_init(ctx):
    """Meta-device init -> fully_shard -> to_empty -> weights broadcast from rank 0."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    full = workload.tiny_llama() if ctx["rank"] == 0 else None
    with torch.device("meta"):
        model = workload.tiny_llama()
    fully_shard_llama(model)
    model.to_empty(device=ctx["device"])
    set_model_state_dict(model, full.state_dict() if full is not None else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    # Non-persistent buffers are not in a state dict: they are rebuilt.
    model.model.rotary_emb.inv_freq.copy_(
        model.model.rotary_emb.compute_default_rope_parameters(model.config)[0]
        if hasattr(model.model.rotary_emb, "compute_default_rope_parameters")
        else workload.tiny_llama().model.rotary_emb.inv_freq)
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


@scenario
def fsdp_activation_checkpointing(ctx):
    model = workload.tiny_llama().to(ctx["device"])
    model.gradient_checkpointing_enable()
    model = fully_shard_llama(model)
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


# --- tensors split across ranks ----------------------------------------------------------


@scenario
def tensor_parallel(ctx):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(ctx["device"].type, (ctx["world"],))
    model = workload.tiny_llama().to(ctx["device"])
    workload.parallelize_tp(model, mesh)
    return run_training(model, ctx)  # every rank sees the whole batch


@scenario
def fsdp_x_tp(ctx):
    """A 2-D mesh: FSDP across 'dp', tensor parallel across 'tp'."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(ctx["device"].type, (ctx["world"] // 2, 2), mesh_dim_names=("dp", "tp"))
    model = workload.tiny_llama().to(ctx["device"])
    workload.parallelize_tp(model, mesh["tp"])
    fully_shard_llama(model, mesh=mesh["dp"])
    dp = mesh["dp"].get_local_rank()
    return run_training(model, ctx, shard=(dp, ctx["world"] // 2))


@scenario
def dtensor(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(ctx["device"].type, (ctx["world"],))
    x = torch.arange(64.0).reshape(8, 8)
    d = distribute_tensor(x.to(ctx["device"]), mesh, [Shard(0)])
    out = {
        "replicate": d.redistribute(mesh, [Replicate()]).to_local().cpu().tolist(),
        "shard1": d.redistribute(mesh, [Shard(1)]).full_tensor().cpu().tolist(),
        "matmul": (d @ d.T).full_tensor().cpu().tolist(),
        "sum": float(d.sum().full_tensor().item()),
        "expected_matmul": (x @ x.T).tolist(),
        "x": x.tolist(),
    }
    return out


# --- checkpoints ---------------------------------------------------------------------


@scenario
def dcp_save(ctx):
    """FSDP2 training state saved sharded; rank 0 also keeps the full weights."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    model = fully_shard_llama(workload.tiny_llama().to(ctx["device"]))
    workload.train(model, ctx["device"], steps=3, shard=(ctx["rank"], ctx["world"]))
    path = os.path.join(ctx["out"], "dcp")
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=path)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if ctx["rank"] == 0:
        torch.save(full, os.path.join(ctx["out"], "dcp_full.pt"))
    return {"path": path, "tensors": len(full)}


@scenario
def dcp_load(ctx):
    """Loads dcp_save's checkpoint into a model sharded another way."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, set_model_state_dict,
    )

    source = os.environ["TORCH_PJRT_TEST_DCP"]
    model = fully_shard_llama(workload.tiny_llama().to(ctx["device"]))
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=os.path.join(source, "dcp"))
    set_model_state_dict(model, state["model"])
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    reference = torch.load(os.path.join(source, "dcp_full.pt"))
    diff = max(float((full[k].float() - reference[k].float()).abs().max()) for k in reference)
    return {"max_abs_diff": diff, "tensors": len(full)}


# --- compiled steps --------------------------------------------------------------------


@scenario
def compiled_ddp(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = torch.compile(DDP(workload.tiny_llama().to(ctx["device"])), backend="tpu")
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


@scenario
def compiled_fsdp(ctx):
    model = fully_shard_llama(workload.tiny_llama().to(ctx["device"]))
    model = torch.compile(model, backend="tpu")
    return run_training(model, ctx, shard=(ctx["rank"], ctx["world"]))


# --- Hugging Face ------------------------------------------------------------------------


@scenario
def hf_tp_plan(ctx):
    """from_pretrained(..., tp_plan="auto") on a saved tiny Llama."""
    import transformers

    source = os.environ["TORCH_PJRT_TEST_HF"]
    model = transformers.LlamaForCausalLM.from_pretrained(source, tp_plan="auto")
    ids = torch.load(os.path.join(source, "ids.pt")).to(ctx["device"])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    from torch.distributed.tensor import DTensor

    if isinstance(logits, DTensor):
        logits = logits.full_tensor()
    reference = torch.load(os.path.join(source, "logits.pt"))
    sharded = sum(isinstance(p, DTensor) for p in model.parameters())
    return {"max_abs_diff": float((logits.cpu() - reference).abs().max()), "dtensor_params": sharded,
            "device": str(next(model.parameters()).device)}


# --- every collective, checked against values computed on the CPU -----------------------


@scenario
def collectives(ctx):
    from torch_pjrt.distributed import transport

    r, n, dev = ctx["rank"], ctx["world"], ctx["device"]
    checks: dict[str, bool] = {}

    def base(k=0):  # what rank k contributes
        return torch.arange(6, dtype=torch.float32) * (k + 1) + k

    def close(name, got, want):
        checks[name] = bool(torch.allclose(got.cpu().to(want.dtype), want, rtol=1e-6, atol=1e-6))

    everyone = torch.stack([base(k) for k in range(n)])
    for op, want in [(dist.ReduceOp.SUM, everyone.sum(0)), (dist.ReduceOp.AVG, everyone.mean(0)),
                     (dist.ReduceOp.MIN, everyone.min(0).values), (dist.ReduceOp.MAX, everyone.max(0).values),
                     (dist.ReduceOp.PRODUCT, everyone.prod(0))]:
        t = base(r).to(dev)
        dist.all_reduce(t, op=op)
        close(f"all_reduce_{op}", t, want)
    t = base(r).to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    close("all_reduce_premul_sum", t, everyone.sum(0) * 0.5)
    ints = torch.tensor([r + 1, -(r + 3)], dtype=torch.int64, device=dev)
    dist.all_reduce(ints, op=dist.ReduceOp.AVG)
    want_int = torch.tensor([sum(k + 1 for k in range(n)), -sum(k + 3 for k in range(n))]).div(n, rounding_mode="trunc")
    close("all_reduce_avg_int64", ints, want_int)
    bits = torch.tensor([1 << r, 7], dtype=torch.int32, device=dev)
    dist.all_reduce(bits, op=dist.ReduceOp.BOR)
    close("all_reduce_bor", bits, torch.tensor([(1 << n) - 1, 7], dtype=torch.int32))
    flags = torch.tensor([r == 0, True, False], device=dev)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    checks["all_reduce_bool_max"] = flags.cpu().tolist() == [True, True, False]
    half = base(r).to(torch.bfloat16).to(dev)
    dist.all_reduce(half)
    checks["all_reduce_bf16"] = bool(torch.allclose(half.cpu().float(), everyone.sum(0), rtol=1e-2))
    view = torch.zeros(3, 6, device=dev)
    row = view[1]
    row.copy_(base(r).to(dev))
    dist.all_reduce(row)
    close("all_reduce_into_a_view", view, torch.stack([torch.zeros(6), everyone.sum(0), torch.zeros(6)]))
    coalesced = [base(r).to(dev), (base(r) * 2).to(dev)]
    dist.all_reduce_coalesced(coalesced)
    close("all_reduce_coalesced", torch.cat(coalesced), torch.cat([everyone.sum(0), everyone.sum(0) * 2]))
    work = dist.all_reduce(t := base(r).to(dev), async_op=True)
    checks["async_work_wait"] = work.wait() is True and bool(torch.allclose(t.cpu(), everyone.sum(0)))
    fut = dist.all_reduce(t2 := base(r).to(dev), async_op=True).get_future()
    close("future_value", fut.wait()[0], everyone.sum(0))

    b = base(r).to(dev)
    dist.broadcast(b, src=n - 1)
    close("broadcast", b, base(n - 1))
    red = base(r).to(dev)
    dist.reduce(red, dst=0)
    close("reduce", red, everyone.sum(0) if r == 0 else base(r))

    out = torch.empty(n * 6, device=dev)
    dist.all_gather_into_tensor(out, base(r).to(dev))
    close("all_gather_into_tensor", out, everyone.reshape(-1))
    stacked = torch.empty(n, 2, 3, device=dev)
    dist.all_gather_into_tensor(stacked, base(r).reshape(2, 3).to(dev))
    close("all_gather_into_tensor_stacked", stacked, everyone.reshape(n, 2, 3))
    lst = [torch.empty(6, device=dev) for _ in range(n)]
    dist.all_gather(lst, base(r).to(dev))
    close("all_gather", torch.stack(lst), everyone)
    gathered = [torch.empty(6, device=dev) for _ in range(n)] if r == 0 else None
    dist.gather(base(r).to(dev), gathered, dst=0)
    if r == 0:
        close("gather", torch.stack(gathered), everyone)

    big = torch.arange(n * 4, dtype=torch.float32) + 100 * r
    allbig = torch.stack([torch.arange(n * 4, dtype=torch.float32) + 100 * k for k in range(n)])
    rs = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(rs, big.to(dev))
    close("reduce_scatter_tensor", rs, allbig.sum(0)[r * 4:(r + 1) * 4])
    rs_avg = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(rs_avg, big.to(dev), op=dist.ReduceOp.AVG)
    close("reduce_scatter_tensor_avg", rs_avg, allbig.mean(0)[r * 4:(r + 1) * 4])
    rsl = torch.empty(4, device=dev)
    dist.reduce_scatter(rsl, [c.to(dev) for c in big.chunk(n)])
    close("reduce_scatter", rsl, allbig.sum(0)[r * 4:(r + 1) * 4])

    a2a = torch.empty(n * 4, device=dev)
    dist.all_to_all_single(a2a, big.to(dev))
    close("all_to_all_single", a2a, torch.cat([allbig[k][r * 4:(r + 1) * 4] for k in range(n)]))
    # Uneven: rank k sends k + j + 1 rows to rank j.
    rows = lambda k, j: k + j + 1  # noqa: E731
    send = [rows(r, j) for j in range(n)]
    recv = [rows(j, r) for j in range(n)]
    src = torch.arange(sum(send) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * r
    dst = torch.empty(sum(recv), 2, device=dev)
    dist.all_to_all_single(dst, src.to(dev), output_split_sizes=recv, input_split_sizes=send)
    pieces = []
    for k in range(n):
        theirs = torch.arange(sum(rows(k, j) for j in range(n)) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * k
        start = sum(rows(k, j) for j in range(r))
        pieces.append(theirs[start:start + rows(k, r)])
    close("all_to_all_single_uneven", dst, torch.cat(pieces))
    outs = [torch.empty(rows(j, r), device=dev) for j in range(n)]
    dist.all_to_all(outs, [torch.full((rows(r, j),), float(10 * r + j), device=dev) for j in range(n)])
    close("all_to_all", torch.cat(outs), torch.cat([torch.full((rows(j, r),), float(10 * j + r)) for j in range(n)]))

    sc = torch.empty(6, device=dev)
    dist.scatter(sc, [base(k).to(dev) for k in range(n)] if r == 0 else None, src=0)
    close("scatter", sc, base(r))

    # Point to point: a ring, posted both ways before either side waits.
    right, left = (r + 1) % n, (r - 1) % n
    incoming = torch.empty(6, device=dev)
    reqs = [dist.isend(base(r).to(dev), right), dist.irecv(incoming, left)]
    for q in reqs:
        q.wait()
    close("isend_irecv_ring", incoming, base(left))
    if r == 0:
        dist.send(torch.tensor([3.5, 4.5], device=dev), dst=1, tag=7)
    elif r == 1:
        got = torch.empty(2, device=dev)
        dist.recv(got, src=0, tag=7)
        close("send_recv_tagged", got, torch.tensor([3.5, 4.5]))

    # A subgroup of the even ranks.
    evens = list(range(0, n, 2))
    sub = dist.new_group(evens)
    if r in evens:
        s = base(r).to(dev)
        dist.all_reduce(s, group=sub)
        close("new_group_all_reduce", s, torch.stack([base(k) for k in evens]).sum(0))

    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r, "text": "x" * (r + 1)})
    checks["all_gather_object"] = objs == [{"rank": k, "text": "x" * (k + 1)} for k in range(n)]
    payload = [{"from": "rank0", "n": n}] if r == 0 else [None]
    dist.broadcast_object_list(payload, src=0)
    checks["broadcast_object_list"] = payload == [{"from": "rank0", "n": n}]
    dist.barrier()
    checks["barrier"] = True
    return {"checks": checks, "transport": transport()}


# --- running -------------------------------------------------------------------------


def run(names: list[str], rank: int, world: int, out: str) -> dict[str, Any]:
    device = torch.device(torch._C._get_privateuse1_backend_name(), rank)
    ctx = {"rank": rank, "world": world, "device": device, "out": out}
    results = {}
    for name in names:
        try:
            results[name] = SCENARIOS[name](ctx)
        except Exception as error:  # reported per scenario; the others still run
            results[name] = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
            print(f"rank {rank}: scenario {name} failed:\n{results[name]['trace']}", file=sys.stderr, flush=True)
    return results


def main() -> None:
    import torch_pjrt  # noqa: F401  (registers the device and the backend)

    out, names = sys.argv[1], sys.argv[2:]
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("tpu", local)
    torch.tpu.set_device(device)
    dist.init_process_group("tpu", device_id=device, timeout=timedelta(seconds=120))
    results = run(names, rank, world, out)
    if rank == 0:
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
