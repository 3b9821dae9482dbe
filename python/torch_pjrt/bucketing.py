"""Padding a changing dimension up to a few fixed sizes ("buckets").

XLA compiles one program per input shape. Text batches whose sequence
length changes every step would compile a program per length (a recompile
storm, which torch_pjrt warns about); padding each batch up to the next of a
few bucket sizes bounds the programs to the number of buckets.

Padding is only correct when what is padded is masked. `pad_batch` pads the
usual Hugging Face fields on the right with values that mask themselves:
`attention_mask` with 0 (padded keys are never attended to), `labels` with
-100 (ignored by the loss), `input_ids` with the pad token and
`token_type_ids` with 0. For causal language models, right padding leaves
every real position's logits and the loss unchanged (asserted in
tests/test_compile.py). A field it does not know raises, rather than being
padded with a value that might be read.

`pad_prompt` does the same for generation, on the left: a decoder-only
model continues from the last position, so prompts are padded in front and
masked, and `generate()` derives positions from the mask. With a static
cache and a compiled decode step, a prompt of a new length inside a bucket
then compiles nothing new (asserted in tests/test_transformers.py); the
generated tokens are those of the unpadded prompt.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import torch

# Values that make a padded position invisible, per field.
PAD_VALUES = {"attention_mask": 0, "labels": -100, "token_type_ids": 0}


def bucket_size(n: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `n`."""
    ordered = sorted(buckets)
    if not ordered or ordered[0] <= 0:
        raise ValueError(f"bucket sizes must be positive, got {list(buckets)}")
    for size in ordered:
        if n <= size:
            return size
    raise ValueError(f"length {n} is longer than the largest bucket ({ordered[-1]}); "
                     f"add a bucket of at least {n}")


def pad_batch(batch: Mapping[str, torch.Tensor], buckets: Sequence[int], *,
              pad_token_id: int, dim: int = 1,
              pad_values: Optional[Mapping[str, int]] = None) -> dict[str, torch.Tensor]:
    """Pads every tensor of `batch` along `dim` (the sequence) on the right,
    up to the bucket that holds the current length. A batch without an
    `attention_mask` gets one (ones over the real tokens), so the padding is
    always masked."""
    values = dict(PAD_VALUES, input_ids=pad_token_id, **(pad_values or {}))
    lengths = {k: v.shape[dim] for k, v in batch.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"pad_batch: the fields have different lengths along dim {dim}: {lengths}")
    (length,) = set(lengths.values())
    target = bucket_size(length, buckets)
    out = dict(batch)
    if "attention_mask" not in out and "input_ids" in out:
        ids = out["input_ids"]
        out["attention_mask"] = torch.ones(ids.shape, dtype=torch.long, device=ids.device)
    extra = target - length
    if extra == 0:
        return out
    for key, tensor in out.items():
        if key not in values:
            raise ValueError(f"pad_batch: no masking pad value for field '{key}'; pass "
                             f"pad_values={{'{key}': ...}} if padding it is safe")
        shape = list(tensor.shape)
        shape[dim] = extra
        pad = torch.full(shape, values[key], dtype=tensor.dtype, device=tensor.device)
        out[key] = torch.cat([tensor, pad], dim=dim)
    return out


def pad_prompt(input_ids: torch.Tensor, buckets: Sequence[int], *, pad_token_id: int,
               attention_mask: Optional[torch.Tensor] = None) -> dict[str, torch.Tensor]:
    """Left-pads a batch of prompts (batch, length) up to the bucket that
    holds `length`; returns `input_ids` and an `attention_mask` that is 0
    over the padding, ready for `model.generate(**padded)`."""
    if input_ids.dim() != 2:
        raise ValueError(f"pad_prompt: input_ids must be (batch, length), got shape "
                         f"{tuple(input_ids.shape)}")
    if attention_mask is None:
        attention_mask = torch.ones(input_ids.shape, dtype=torch.long, device=input_ids.device)
    elif attention_mask.shape != input_ids.shape:
        raise ValueError(f"pad_prompt: attention_mask shape {tuple(attention_mask.shape)} "
                         f"differs from input_ids shape {tuple(input_ids.shape)}")
    extra = bucket_size(input_ids.shape[1], buckets) - input_ids.shape[1]
    if extra == 0:
        return {"input_ids": input_ids, "attention_mask": attention_mask}
    rows = input_ids.shape[0]
    ids_pad = torch.full((rows, extra), pad_token_id, dtype=input_ids.dtype, device=input_ids.device)
    mask_pad = torch.zeros((rows, extra), dtype=attention_mask.dtype, device=attention_mask.device)
    return {"input_ids": torch.cat([ids_pad, input_ids], 1),
            "attention_mask": torch.cat([mask_pad, attention_mask], 1)}
