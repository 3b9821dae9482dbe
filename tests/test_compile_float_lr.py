"""A compiled training step with a plain float lr under an LR scheduler
compiles while the float first changes and never again: the changing value
becomes a program input instead of a constant (torch_pjrt._compile.
symbolic_scalars). Losses and weights match the same loop in eager mode."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name
S = torch.optim.lr_scheduler
STEPS = 7


def linear_warmup(opt):
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=20)


SCHEDULERS = {
    "LambdaLR": lambda opt: S.LambdaLR(opt, lambda s: 1.0 / (1 + s)),
    "StepLR": lambda opt: S.StepLR(opt, step_size=1, gamma=0.7),
    # Also moves Adam's betas[0] every step (cycle_momentum).
    "OneCycleLR": lambda opt: S.OneCycleLR(opt, max_lr=0.05, total_steps=20),
    "CosineAnnealingLR": lambda opt: S.CosineAnnealingLR(opt, T_max=10),
    "linear_warmup": linear_warmup,
}


def train(schedule: str, compiled: bool, clip: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(NAME)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = SCHEDULERS[schedule](opt)
    x, y = torch.randn(8, 16).to(NAME), torch.randn(8, 4).to(NAME)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        return loss

    if compiled:
        step = torch.compile(step, backend="tpu")
    losses, compiles, lrs = [], [], []
    for _ in range(STEPS):
        losses.append(step().item())
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
        compiles.append(torch_pjrt.metrics()["compile_graph_compiles"])
    return losses, compiles, lrs, model


@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clip_grad_norm"])
@pytest.mark.parametrize("schedule", list(SCHEDULERS))
def test_float_lr_under_a_scheduler_compiles_in_the_first_two_steps_only(schedule, clip):
    eager, _, eager_lrs, eager_model = train(schedule, compiled=False, clip=clip)
    torch._dynamo.reset()
    torch_pjrt.reset_metrics()
    got, compiles, lrs, model = train(schedule, compiled=True, clip=clip)
    assert isinstance(lrs[0], float) and len(set(lrs)) == STEPS  # a new float every step
    # Step 1 compiles with the value; step 2 once more with it as an input.
    assert compiles[2:] == [compiles[1]] * (STEPS - 2), compiles
    torch.testing.assert_close(torch.tensor(got), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    for a, b in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=1e-4, atol=1e-5)


def train_variant(mode: str, compiled: bool):
    """LambdaLR with a float lr and: two accumulated micro-batches per step,
    bf16 autocast with a GradScaler, or only the model compiled (the
    optimizer and scheduler outside)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(NAME)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = S.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    scaler = torch.amp.GradScaler(NAME) if mode == "grad_scaler" else None
    xs = [torch.randn(8, 16).to(NAME) for _ in range(2)]
    y = torch.randn(8, 4).to(NAME)
    forward = torch.compile(model, backend="tpu") if compiled and mode == "model_only" else model

    def step():
        total = torch.zeros((), device=NAME)
        for x in xs if mode == "accumulate" else xs[:1]:
            if scaler is not None:
                with torch.autocast(NAME, dtype=torch.bfloat16):
                    loss = torch.nn.functional.mse_loss(forward(x).float(), y)
                scaler.scale(loss).backward()
            else:
                loss = torch.nn.functional.mse_loss(forward(x), y) / (2 if mode == "accumulate" else 1)
                loss.backward()
            total = total + loss.detach()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad()
        return total

    if compiled and mode != "model_only":
        step = torch.compile(step, backend="tpu")
    losses, compiles = [], []
    for _ in range(STEPS):
        losses.append(step().item())
        sched.step()
        compiles.append(torch_pjrt.metrics()["compile_graph_compiles"])
    return losses, compiles


@pytest.mark.parametrize("mode", ["accumulate", "grad_scaler", "model_only"])
def test_float_lr_with_accumulation_grad_scaler_or_only_the_model_compiled(mode):
    eager, _ = train_variant(mode, compiled=False)
    torch._dynamo.reset()
    torch_pjrt.reset_metrics()
    got, compiles = train_variant(mode, compiled=True)
    assert compiles[2:] == [compiles[1]] * (STEPS - 2), compiles
    # bf16 autocast: the compiled and eager programs round differently.
    tol = dict(rtol=2e-3, atol=1e-3) if mode == "grad_scaler" else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(eager), **tol)


def _clipped_adamw_step(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = SCHEDULERS["CosineAnnealingLR"](opt)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    return model, step, sched


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_compiled_training_step_runs_as_one_program(mode):
    """Dynamo splits the step into forward, backward, clipping and AdamW
    graphs (and AdamW's float-lr arithmetic once split it into 10); they are
    recorded into the device's pending graph and run as one program at the
    end of the optimizer step. Strict mode launches the eager `ones_like`
    seed of loss.backward() on its own; fused mode records it too. Losses
    and weights match the same loop on the CPU, and memory stays put."""
    cpu_model, cpu_step, cpu_sched = _clipped_adamw_step("cpu")
    expected = []
    for _ in range(6):
        expected.append(cpu_step().item())
        cpu_sched.step()
    torch._dynamo.reset()
    with torch_pjrt.eager_mode(mode):
        model, step, sched = _clipped_adamw_step(NAME)
        step = torch.compile(step, backend="tpu")
        losses, executions, memory = [], [], []
        for _ in range(6):
            torch_pjrt.reset_metrics()
            before = {g["name"]: g["calls"] for g in torch_pjrt.compile_report()}
            loss = step()
            sched.step()
            executions.append(torch_pjrt.metrics()["executions"])  # before reading the loss
            ran = [g for g in torch_pjrt.compile_report() if g["calls"] > before.get(g["name"], 0)]
            losses.append(loss.item())
            memory.append(getattr(torch, NAME).memory_allocated())
        m = torch_pjrt.metrics()
    assert ran and all(g["regions"] == 1 and g["eager_ops"] == {} for g in ran), ran
    # forward, backward, clipping, AdamW, and `loss.detach()` (no program)
    assert len(ran) == 5 and m["compilations"] == 0, (ran, m["compilations"])
    print(f"{mode}: programs per compiled step: {executions} ({len(ran)} graphs)")
    assert executions[2:] == [2 if mode == "strict" else 1] * 4, executions
    assert len(set(memory[2:])) == 1, memory
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-5)
    for a, b in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5)


def test_debug_mode_runs_each_compiled_graph_at_once():
    torch._dynamo.reset()
    with torch_pjrt.eager_mode("debug"):
        model, step, sched = _clipped_adamw_step(NAME)
        step = torch.compile(step, backend="tpu")
        for _ in range(3):
            step()
            sched.step()
        torch_pjrt.reset_metrics()
        step()
        executions = torch_pjrt.metrics()["executions"]
    # forward, the seed, backward, clipping, AdamW: each run alone.
    assert executions == 5, executions


def test_graph_of_aliases_only_runs_no_program():
    x = torch.randn(4, 3, device=NAME)
    torch._dynamo.reset()
    torch_pjrt.reset_metrics()
    y = torch.compile(lambda t: t.detach(), backend="tpu")(x)
    m = torch_pjrt.metrics()
    assert m["compilations"] + m["cache_hits_disk"] == 0 and m["executions"] == 0
    assert torch.equal(y.cpu(), x.cpu()) and not y.requires_grad
    y.add_(1)  # an alias, as in eager
    torch.testing.assert_close(x.cpu(), y.cpu())


def test_host_scalar_arithmetic_joins_the_program_only_when_it_stays_inside():
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_pjrt._compile.capture import supported_nodes

    def f(x, s):
        return x * (s * 2 + 1), s * 3

    x, s = torch.randn(4, device=NAME), torch.tensor(0.5)
    gm = make_fx(f)(x, s)
    kept = {n.name for n in supported_nodes(gm)}
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    inner, returned = [n.name for n in ops if n.name != ops[-1].name], ops[-1].name
    assert set(inner) <= kept and returned not in kept, (kept, [n.format_node() for n in ops])
    torch._dynamo.reset()
    got = torch.compile(f, backend="tpu")(x, s)
    expected = f(x.cpu(), s)
    assert got[0].device.type == NAME and got[1].device.type == "cpu"
    torch.testing.assert_close(got[0].cpu(), expected[0])
    torch.testing.assert_close(got[1], expected[1])
