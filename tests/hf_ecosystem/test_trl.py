"""TRL's SFTTrainer on the tpu device, unchanged: supervised fine-tuning of
the tiny Llama for 10 steps gives the CPU's losses, run eagerly and compiled
with `torch_compile_backend="tpu"`.

The data take SFTTrainer's own path from text to batches: a conversational
prompt-completion dataset (chat messages) is rendered with the byte-level
tokenizer's chat template, tokenized, its prompt tokens masked out of the
labels (completion-only loss, TRL's default for such data) and padded by
TRL's collator; a plain-text dataset is packed (best-fit decreasing, so
padding-free batches with position ids restarting at each document). The
loss is TRL's own: its fused LM head computes per-token log-probabilities
in tiles without the full logits, with gradient checkpointing on (SFTConfig's
default). Training runs in float32 (SFTConfig would default to bf16).

No operation may fall back to the CPU, and the compiled run may compile
nothing after its second step: TRL pads every batch to the same length
(`pad_to_multiple_of`), so the programs of step 2 serve all later ones.
Dynamo splits the compiled model into several graphs (it does not trace
TRL's `torch.mm(..., out=)` into a non-contiguous tile, nor a context
variable set under gradient checkpointing); the code between them runs
eagerly on the device."""

from __future__ import annotations

import random

import pytest
import torch
import torch._dynamo

import torch_pjrt
from torch_pjrt._compile import compile_counters

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from tiny_models import llama  # noqa: E402
from tiny_tokenizers import byte_tokenizer  # noqa: E402

DEV = torch_pjrt.settings().device_name
STEPS = 10
BATCH = 4
LENGTH = 64


def _chat_dataset():
    """Additions asked by the user and answered by the assistant."""
    rng = random.Random(0)
    prompts, completions = [], []
    for _ in range(STEPS * BATCH):
        a, b = rng.randrange(100), rng.randrange(100)
        prompts.append([{"role": "user", "content": f"{a}+{b}="}])
        completions.append([{"role": "assistant", "content": str(a + b)}])
    return datasets.Dataset.from_dict({"prompt": prompts, "completion": completions})


def _text_dataset():
    """Short sentences of varied length, to be packed into rows of LENGTH."""
    rng = random.Random(1)
    words = "the a cat dog sat ran on under mat log red big small quickly".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(2, 9)))
             for _ in range(STEPS * BATCH * 3)]
    return datasets.Dataset.from_dict({"text": texts})


class _CompilationsPerStep(transformers.TrainerCallback):
    """Programs compiled (or read from the disk cache) so far, after each step."""

    def __init__(self) -> None:
        self.total_after_step: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        m = torch_pjrt.metrics()
        self.total_after_step.append(m["compilations"] + m["cache_hits_disk"])


def _train(tmp_path, device: str, dataset, compiled: bool = False, **config):
    torch._dynamo.reset()
    name = f"{device}-{'compiled' if compiled else 'eager'}-{len(list(tmp_path.iterdir()))}"
    args = trl.SFTConfig(
        output_dir=str(tmp_path / name), use_cpu=device == "cpu", bf16=False,
        per_device_train_batch_size=BATCH, max_steps=STEPS, learning_rate=1e-3, warmup_steps=2,
        logging_steps=1, report_to=[], save_strategy="no", dataloader_pin_memory=False,
        disable_tqdm=True, seed=0, max_length=LENGTH, torch_compile=compiled,
        torch_compile_backend="tpu" if compiled else None, **config)
    counter = _CompilationsPerStep()
    trainer = trl.SFTTrainer(model=llama(), args=args, train_dataset=dataset,
                             processing_class=byte_tokenizer(), callbacks=[counter])
    assert trainer.args.device.type == device
    torch_pjrt.reset_metrics()
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return logs, counter.total_after_step, trainer


def _losses(logs):
    return torch.tensor([h["loss"] for h in logs])


@pytest.fixture(scope="module")
def chat_cpu(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("trl"), "cpu", _chat_dataset(), pad_to_multiple_of=LENGTH)


def test_sft_prompt_completion_matches_cpu(chat_cpu, tmp_path):
    cpu_logs, _, _ = chat_cpu
    logs, totals, trainer = _train(tmp_path, DEV, _chat_dataset(), pad_to_multiple_of=LENGTH)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    # TRL masked the prompts: fewer tokens carry a label than are in the batch
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape == (BATCH, LENGTH)
    labelled = (batch["labels"] != -100).sum()
    assert 0 < labelled < batch["attention_mask"].sum()
    assert len(logs) == len(cpu_logs) == STEPS
    print(f"eager losses: {_losses(logs).tolist()}")
    print(f"max |loss - cpu loss|: {(_losses(logs) - _losses(cpu_logs)).abs().max().item():.2e}")
    print(f"programs compiled per step: {[b - a for a, b in zip([0] + totals, totals)]}")
    # float32 on both; the device's reductions are ordered differently
    torch.testing.assert_close(_losses(logs), _losses(cpu_logs), rtol=1e-4, atol=1e-4)
    for key in ("mean_token_accuracy", "entropy", "grad_norm"):
        torch.testing.assert_close(torch.tensor([h[key] for h in logs]),
                                   torch.tensor([h[key] for h in cpu_logs]), rtol=1e-3, atol=1e-3)
    assert _losses(logs)[-1] < _losses(logs)[0]


def test_sft_prompt_completion_compiled_matches_cpu(chat_cpu, tmp_path):
    cpu_logs, _, _ = chat_cpu
    logs, totals, trainer = _train(tmp_path, DEV, _chat_dataset(), compiled=True,
                                   pad_to_multiple_of=LENGTH)
    assert trainer.accelerator.state.dynamo_plugin.backend.value == "TPU"
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    per_step = [b - a for a, b in zip([0] + totals, totals)]
    print(f"compiled losses: {_losses(logs).tolist()}")
    print(f"max |loss - cpu loss|: {(_losses(logs) - _losses(cpu_logs)).abs().max().item():.2e}")
    print(f"programs compiled per step: {per_step}")
    counters = compile_counters()
    breaks = {reason.splitlines()[0]: n
              for reason, n in torch._dynamo.utils.counters["graph_break"].items()}
    print(f"compile counters: {counters}; Dynamo's graph breaks: {breaks}")
    # every graph compiled once and ran on the device, none of it eagerly
    assert counters["graphs"] > 0 and counters["graph_compiles"] == counters["graphs"]
    assert counters["graph_eager_nodes"] == 0
    assert len(logs) == len(cpu_logs) == STEPS
    torch.testing.assert_close(_losses(logs), _losses(cpu_logs), rtol=1e-4, atol=1e-4)
    assert totals[1] > 0, "nothing compiled: the compiled run did not run on the device"
    assert totals[-1] == totals[1], f"compiled after step 2: {per_step}"


def test_sft_packed_text_matches_cpu(tmp_path):
    # the row of documents padded to one length, so the device compiles once
    config = dict(packing=True, packing_strategy="bfd", pad_to_multiple_of=BATCH * LENGTH)
    cpu_logs, _, _ = _train(tmp_path, "cpu", _text_dataset(), **config)
    logs, _, trainer = _train(tmp_path, DEV, _text_dataset(), **config)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    batch = next(iter(trainer.get_train_dataloader()))
    # padding-free: one row of documents, positions restarting at each
    assert batch["input_ids"].shape == (1, BATCH * LENGTH) and "attention_mask" not in batch
    assert (batch["position_ids"] == 0).sum() > BATCH
    print(f"packed losses: {_losses(logs).tolist()}")
    print(f"max |loss - cpu loss|: {(_losses(logs) - _losses(cpu_logs)).abs().max().item():.2e}")
    assert len(logs) == len(cpu_logs) == STEPS
    torch.testing.assert_close(_losses(logs), _losses(cpu_logs), rtol=1e-4, atol=1e-4)
