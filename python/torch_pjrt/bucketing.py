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
