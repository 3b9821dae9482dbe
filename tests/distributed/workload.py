"""The models, data and parallel plans the distributed tests share: a tiny
Llama from a config, a fixed stream of token batches, and the training loop
every scenario runs (so a parallel run and the single-device reference run
exactly the same code)."""

from __future__ import annotations

import threading

import torch
import transformers

VOCAB = 128
STEPS = 10
BATCH = 4
SEQ = 16


def config() -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="sdpa",
    )


# torch's CPU generator is one per process: ranks that are threads build
# their models one at a time, so each draws the same weights.
_init_lock = threading.Lock()


def tiny_llama() -> transformers.LlamaForCausalLM:
    with _init_lock:
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(config())


def batches(steps: int = STEPS, batch: int = BATCH, seq: int = SEQ) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (batch, seq), generator=g) for _ in range(steps)]


def compilations() -> int:
    import torch_pjrt

    return torch_pjrt.metrics()["compilations"]


def train(model, device, *, steps: int = STEPS, shard: tuple[int, int] = (0, 1),
          accumulate: int = 1, no_sync=None, mean_loss=None, barrier=None,
          late_compiles: list | None = None) -> list[float]:
    """AdamW with a float lr and a LambdaLR schedule; this rank takes part
    `shard[0]` of `shard[1]` of each step's batch, split in `accumulate`
    micro-batches. `no_sync`: DDP's context for all but the last
    micro-batch; `mean_loss` turns this rank's loss into the group's mean.
    `late_compiles` receives how many programs were compiled after step 2
    (`barrier` first lines the ranks up, so none is still in step 2)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + 0.1 * s))
    losses = []
    start = None
    for step, ids in enumerate(batches(steps)):
        if step == 2 and late_compiles is not None:
            if barrier is not None:
                barrier()
            start = compilations()
        ids = ids.chunk(shard[1])[shard[0]]
        opt.zero_grad()
        total = 0.0
        for m, micro in enumerate(ids.chunk(accumulate)):
            micro = micro.to(device)
            last = m == accumulate - 1
            ctx = no_sync() if (no_sync is not None and not last) else _nothing()
            with ctx:
                loss = model(input_ids=micro, labels=micro).loss / accumulate
                loss.backward()
            total = total + loss.detach().float()
        opt.step()
        sched.step()
        if mean_loss is not None:
            total = mean_loss(total)
        losses.append(float(total.item()))
    if late_compiles is not None and start is not None:
        if barrier is not None:
            barrier()
        late_compiles.append(compilations() - start)
    return losses


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def parallelize_tp(model, mesh) -> None:
    """Tensor parallel for the whole tiny Llama: vocabulary-parallel
    embedding, column/row-parallel attention and MLP with the residual
    stream sequence-parallel inside each layer, sequence-parallel norms, a
    column-parallel head. Every parameter becomes a DTensor."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, PrepareModuleInput, PrepareModuleOutput, RowwiseParallel,
        SequenceParallel, parallelize_module,
    )

    parallelize_module(model, mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    parallelize_module(model.model.norm, mesh,
                       PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),)))
    parallelize_module(model.model.norm, mesh, SequenceParallel())
    for layer in model.model.layers:
        parallelize_module(layer, mesh, {
            "": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),)),
            "input_layernorm": SequenceParallel(),
            "post_attention_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                            desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })
        parallelize_module(layer, mesh,
                           PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Replicate()))
