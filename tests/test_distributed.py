"""torch.distributed on tpu: the standard scaling APIs with unchanged user
code, run by real processes under torchrun (the host transport) and by
ranks as threads in one process (the XLA transport), compared with one
process training on the whole batch. Scenarios live in tests/distributed/;
each group of them runs in one launch to keep the suite fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_pjrt

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed")
sys.path.insert(0, HERE)
import workload  # noqa: E402

TRAINING_2 = ["ddp", "ddp_no_sync", "fsdp", "fsdp_mixed_precision", "fsdp_meta_init",
              "fsdp_activation_checkpointing", "tensor_parallel", "compiled_ddp", "compiled_fsdp"]
LOSS = dict(rtol=1e-4, atol=1e-5)  # fp32 on the CPU plugin: a different reduction order only
PARAMS = dict(rtol=1e-4, atol=2e-3)  # sums of thousands of weights


def torchrun(nproc: int, args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    full = dict(os.environ, TORCH_PJRT_CPU_DEVICES=str(nproc), OMP_NUM_THREADS="1", **env)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--standalone", *args]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout)


def results_of(out: str, proc: subprocess.CompletedProcess) -> dict:
    path = os.path.join(out, "results.json")
    assert os.path.exists(path), f"no results (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    with open(path) as f:
        return json.load(f)


def ok(results: dict, name: str) -> dict:
    r = results[name]
    assert "error" not in r, f"{name} failed: {r.get('error')}\n{r.get('trace', '')}"
    return r


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    """A saved tiny Llama, an input and the logits one device gives."""
    path = tmp_path_factory.mktemp("hf")
    model = workload.tiny_llama()
    model.save_pretrained(path)
    ids = torch.randint(0, workload.VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    torch.save(ids, path / "ids.pt")
    with torch.no_grad():
        logits = model.to("tpu")(input_ids=ids.to("tpu")).logits.cpu()
    torch.save(logits, path / "logits.pt")
    return str(path)


@pytest.fixture(scope="module")
def reference():
    """One process, one device, the whole batch: what every parallel run must match."""
    plain = workload.tiny_llama().to("tpu")
    losses = workload.train(plain, "tpu")
    accumulated = workload.tiny_llama().to("tpu")
    acc_losses = workload.train(accumulated, "tpu", accumulate=2)

    def sums(m):
        return [float(p.detach().double().sum()) for _, p in sorted(m.named_parameters())]

    return {"losses": losses, "params": sums(plain), "acc_losses": acc_losses, "acc_params": sums(accumulated)}


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, hf_checkpoint):
    out = str(tmp_path_factory.mktemp("two_processes"))
    proc = torchrun(2, [os.path.join(HERE, "scenarios.py"), out, "collectives", "dtensor", "dcp_save",
                        "hf_tp_plan", *TRAINING_2], {"TORCH_PJRT_TEST_HF": hf_checkpoint})
    return results_of(out, proc) | {"_out": out}


@pytest.fixture(scope="module")
def four_processes(tmp_path_factory, two_processes):
    out = str(tmp_path_factory.mktemp("four_processes"))
    proc = torchrun(4, [os.path.join(HERE, "scenarios.py"), out, "collectives", "ddp", "fsdp", "fsdp_x_tp",
                        "dcp_load"], {"TORCH_PJRT_TEST_DCP": two_processes["_out"]})
    return results_of(out, proc)


@pytest.fixture(scope="module")
def two_threads(tmp_path_factory):
    """Ranks as threads of one process: every group uses XLA collective programs."""
    out = str(tmp_path_factory.mktemp("two_threads"))
    code = f"""
        import json, sys
        sys.path.insert(0, {HERE!r})
        import torch_pjrt, scenarios
        from torch_pjrt.distributed import run_threads
        names = ["collectives", "dtensor", *{THREADS_TRAINING!r}]
        results = run_threads(lambda r: scenarios.run(names, r, 2, {out!r}), 2)
        json.dump(results[0], open({os.path.join(out, "results.json")!r}, "w"))
    """
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICES="2")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=600)
    return results_of(out, proc)


RUNS = ["two_processes", "four_processes", "two_threads"]


@pytest.mark.parametrize("run", RUNS)
def test_every_collective_matches_cpu(run, request):
    r = ok(request.getfixturevalue(run), "collectives")
    assert r["transport"] == ("xla" if run == "two_threads" else "host")
    failed = [name for name, good in r["checks"].items() if not good]
    assert not failed, f"{run}: wrong results from {failed}"
    assert len(r["checks"]) >= 30


THREADS_TRAINING = ["ddp", "ddp_no_sync", "fsdp", "fsdp_mixed_precision", "fsdp_meta_init",
                    "fsdp_activation_checkpointing", "tensor_parallel", "compiled_ddp", "compiled_fsdp"]
PAIRS = ([("two_processes", n) for n in TRAINING_2]
         + [("four_processes", n) for n in ("ddp", "fsdp", "fsdp_x_tp")]
         + [("two_threads", n) for n in THREADS_TRAINING])


@pytest.mark.parametrize("run,name", PAIRS)
def test_training_matches_one_process(run, name, request, reference):
    r = ok(request.getfixturevalue(run), name)
    want_losses = reference["acc_losses"] if name == "ddp_no_sync" else reference["losses"]
    want_params = reference["acc_params"] if name == "ddp_no_sync" else reference["params"]
    if name == "fsdp_mixed_precision":
        # bf16 compute against the fp32 reference: close, not equal.
        torch.testing.assert_close(r["losses"], want_losses, rtol=5e-3, atol=5e-3)
        return
    torch.testing.assert_close(r["losses"], want_losses, **LOSS)
    torch.testing.assert_close(r["params"], want_params, **PARAMS)
    # Collective programs and every other program are cached: nothing
    # compiles after the second step.
    assert r["late_compiles"] == 0


def test_dtensor_redistribute(two_processes, two_threads):
    for results in (two_processes, two_threads):
        r = ok(results, "dtensor")
        x = torch.tensor(r["x"])
        assert torch.equal(torch.tensor(r["shard1"]), x)
        assert torch.equal(torch.tensor(r["replicate"]), x)
        torch.testing.assert_close(torch.tensor(r["matmul"]), torch.tensor(r["expected_matmul"]))
        assert r["sum"] == float(x.sum())


def test_checkpoint_saved_on_two_loads_on_four_and_on_one(two_processes, four_processes):
    import torch.distributed.checkpoint as dcp

    saved = ok(two_processes, "dcp_save")
    loaded = ok(four_processes, "dcp_load")
    assert loaded["max_abs_diff"] == 0.0 and loaded["tensors"] == saved["tensors"]
    # One process, no process group: DCP reads the shards into a plain model.
    model = workload.tiny_llama().to("tpu")
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=saved["path"])
    model.load_state_dict(state["model"])
    reference = torch.load(os.path.join(two_processes["_out"], "dcp_full.pt"))
    for key, value in reference.items():
        torch.testing.assert_close(model.state_dict()[key].cpu(), value, rtol=0, atol=0)


def test_hf_tp_plan_gives_one_device_logits(two_processes):
    r = ok(two_processes, "hf_tp_plan")
    assert r["dtensor_params"] > 0, "tp_plan='auto' left every weight whole"
    assert r["device"] == "tpu:0"
    assert r["max_abs_diff"] < 1e-5


# --- failures end in errors, never hangs -------------------------------------------------


@pytest.mark.parametrize("case,expect", [
    ("shapes", "the ranks called different collectives"),
    ("dtypes", "torch.float32 with 4 element(s); rank 1 called all_gather_into_tensor of torch.int64"),
    ("reduce_op", "cannot use ReduceOp.BAND with torch.float32 tensors"),
    ("rank_exits", "failed"),
    ("never_called", "did not complete within 4000 ms"),
])
def test_failures_raise_within_the_timeout(tmp_path, case, expect):
    proc = torchrun(2, [os.path.join(HERE, "failures.py"), str(tmp_path), case], {}, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert (tmp_path / "rank0.json").exists(), f"rank 0 wrote no report (exit {proc.returncode}):\n" \
        f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    report = json.load(open(tmp_path / "rank0.json"))
    assert report["error"] is not None, f"{case}: rank 0 raised nothing"
    assert report["is_runtime_error"]
    assert expect in report["message"], report["message"]
    assert report["seconds"] < 10
    if case == "reduce_op":
        # The same type CPU PyTorch's gloo raises for this call.
        assert report["error"] == "RuntimeError"
    elif case not in ("rank_exits",):
        assert report["error"] == "DistBackendError"


def test_thread_ranks_that_disagree_or_stay_away_raise():
    code = """
        import time, torch, torch_pjrt, torch.distributed as dist
        from datetime import timedelta
        from torch_pjrt.distributed import run_threads
        def shapes(rank):
            dist.all_reduce(torch.ones(4 if rank == 0 else 8, device="tpu"))
        def missing(rank):
            if rank == 0:
                dist.all_reduce(torch.ones(2, device="tpu"))
        for fn in (shapes, missing):
            start = time.monotonic()
            try:
                run_threads(fn, 2, timeout=timedelta(seconds=2))
                print(fn.__name__, "no error")
            except dist.DistBackendError as e:
                print(fn.__name__, "%.1f" % (time.monotonic() - start), str(e).splitlines()[0])
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dict(os.environ, TORCH_PJRT_CPU_DEVICES="2"), timeout=120)
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert "different collectives" in lines["shapes"] and "float32[8]" in lines["shapes"], proc.stdout + proc.stderr
    assert "waiting for rank(s) 1" in lines["missing"], proc.stdout + proc.stderr
    assert float(lines["missing"].split()[1]) < 6


def test_init_process_group_times_out():
    code = """
        import time, torch, torch_pjrt, torch.distributed as dist
        from datetime import timedelta
        start = time.monotonic()
        try:
            dist.init_process_group("tpu", init_method="tcp://127.0.0.1:0", rank=0, world_size=2,
                                    timeout=timedelta(seconds=2))
        except dist.DistError as e:
            print("raised", type(e).__name__, "%.1f" % (time.monotonic() - start))
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.startswith("raised DistStoreError"), proc.stdout + proc.stderr[-2000:]
    assert float(proc.stdout.split()[2]) < 10


def test_backend_registration_and_init_forms(tmp_path):
    """'tpu', 'cpu:gloo,tpu:tpu' and device_id= all give a working group."""
    code = """
        import os, torch, torch_pjrt, torch.distributed as dist
        from datetime import timedelta
        rank = int(os.environ["RANK"])
        form = os.environ["FORM"]
        if form == "tpu":
            dist.init_process_group("tpu")
        elif form == "mixed":
            dist.init_process_group("cpu:gloo,tpu:tpu")
        else:
            dist.init_process_group(device_id=torch.device("tpu", rank))
        torch.tpu.set_device(rank)
        t = torch.full((2,), float(rank + 1), device="tpu")
        dist.all_reduce(t)
        c = torch.full((2,), float(rank + 1))
        if form == "mixed":
            dist.all_reduce(c)  # CPU tensors go to gloo
        with open(os.path.join(os.environ["OUT"], f"{form}{rank}.txt"), "w") as f:
            f.write(f"{t.cpu().tolist()} {c.tolist()} {dist.get_backend()}")
        dist.destroy_process_group()
    """
    script = tmp_path / "forms.py"
    script.write_text(textwrap.dedent(code))
    for form in ("tpu", "mixed", "device_id"):
        proc = torchrun(2, [str(script)], {"FORM": form, "OUT": str(tmp_path)}, timeout=120)
        for rank in range(2):
            path = tmp_path / f"{form}{rank}.txt"
            assert path.exists(), proc.stderr[-3000:]
            line = path.read_text()
            assert line.startswith("[3.0, 3.0]"), line
            if form == "mixed":
                assert line.count("[3.0, 3.0]") == 2, line  # CPU tensors went through gloo


def test_transport_names_and_registration():
    import torch.distributed as dist

    assert "TPU" in dist.Backend._plugins and "TPU_DIST" in dist.Backend._plugins
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu"
    assert torch_pjrt.distributed.BACKEND_NAMES == ("tpu", "tpu_dist")
