"""A small training script for `accelerate launch`, run by
tests/hf_ecosystem/test_accelerate.py: the tiny Llama trains for a few AdamW
steps in the usual accelerate idiom (`prepare`, `autocast`, `backward`) on
whatever device and precision the launcher chose, then prints one line,
`RESULT <json>`, with that device, the precision, the dtype the attention's
query projection computed in, the losses and (on the tpu device) the
operations that fell back to the CPU.

The script imports torch_pjrt itself: that import registers the tpu device,
and with it accelerate picks that device unless the launcher says `--cpu`.
The same script therefore runs on the CPU under `accelerate launch --cpu`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import torch_pjrt
from accelerate import Accelerator
from accelerate.utils import set_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import llama  # noqa: E402

STEPS = 5
BATCH = 4
LENGTH = 32


def main() -> None:
    accelerator = Accelerator()
    set_seed(0)
    model = llama()
    # learnable sequences: each counts up, modulo 50, from a random start by
    # a random stride, so the loss falls fast
    g = torch.Generator().manual_seed(1)
    start = torch.randint(0, 50, (STEPS * BATCH, 1), generator=g)
    stride = torch.randint(1, 4, (STEPS * BATCH, 1), generator=g)
    ids = 3 + (start + stride * torch.arange(LENGTH)) % 50
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=BATCH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    dtypes = []
    # the dtype a projection computes in tells whether autocast was on
    model.model.layers[0].self_attn.q_proj.register_forward_hook(
        lambda module, args, out: dtypes.append(str(out.dtype)))
    torch_pjrt.reset_metrics()
    losses = []
    model.train()
    for (batch,) in loader:
        with accelerator.autocast():
            loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    device = accelerator.device
    result = {
        "device": device.type,
        "batch_device": batch.device.type,
        "mixed_precision": accelerator.mixed_precision,
        "q_proj_dtypes": sorted(set(dtypes)),
        "losses": losses,
        "fallback_ops": torch_pjrt.metrics()["fallback_ops"] if device.type != "cpu" else {},
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
