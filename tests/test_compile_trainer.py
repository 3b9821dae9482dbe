"""The Hugging Face Trainer with `torch_compile=True,
torch_compile_backend="tpu"` and its default optimizer and scheduler (fused
AdamW with a float lr under linear warmup and decay, gradient clipping):
losses match the eager run on the device, and nothing compiles after the
second step."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import torch_pjrt
from torch_pjrt._compile import compile_counters

transformers = pytest.importorskip("transformers")

from test_transformers import _TokenDataset, tiny  # noqa: E402

NAME = torch_pjrt.settings().device_name
STEPS = 8


class _CompilationsPerStep(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.total_after_step: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        m = torch_pjrt.metrics()
        self.total_after_step.append(m["compilations"] + m["cache_hits_disk"])


def _train(tmp_path, compiled: bool, backend: str = "tpu"):
    torch._dynamo.reset()
    model = tiny("llama", "sdpa").train()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / ("compiled" if compiled else "eager")),
        per_device_train_batch_size=4, max_steps=STEPS, learning_rate=1e-3, warmup_steps=2,
        logging_steps=1, report_to=[], save_strategy="no", dataloader_pin_memory=False,
        disable_tqdm=True, seed=0, torch_compile=compiled,
        torch_compile_backend=backend if compiled else None)
    counter = _CompilationsPerStep()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_TokenDataset(),
                                   callbacks=[counter])
    torch_pjrt.reset_metrics()
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, counter.total_after_step, trainer


@pytest.mark.parametrize("backend", ["tpu", "inductor"])
def test_trainer_compiled_matches_eager_and_stops_compiling(tmp_path, backend):
    """"inductor" (the Trainer's default backend) reaches the tpu backend
    through torch.compile's default routing."""
    eager_losses, _, _ = _train(tmp_path, compiled=False)
    losses, totals, trainer = _train(tmp_path, compiled=True, backend=backend)
    assert trainer.args.device.type == NAME
    assert trainer.accelerator.state.dynamo_plugin.backend.value == backend.upper()
    assert len(losses) == len(eager_losses) == STEPS
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses),
                               rtol=1e-5, atol=1e-5)
    counters = compile_counters()
    # the model's forward and backward, each compiled once, run every step
    assert counters["graphs"] == 2 and counters["graph_compiles"] == 2
    assert counters["graph_calls"] == 2 * STEPS and counters["graph_eager_nodes"] == 0
    assert counters["graphs_routed_from_inductor"] == (1 if backend == "inductor" else 0)
    after_step_2 = totals[-1] - totals[1]
    print(f"programs compiled per step: {[b - a for a, b in zip([0] + totals, totals)]}")
    assert after_step_2 == 0, totals
    assert torch_pjrt.metrics()["fallback_ops"] == {}
