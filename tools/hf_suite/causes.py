"""Groups tpu-only failures of Hugging Face's tests by cause, from the first
line of each failure. The first pattern that matches names the cause."""

from __future__ import annotations

import re

CAUSES: list[tuple[str, str]] = [
    # torch.nn.attention.flex_attention checks the device type against a
    # fixed list (cuda, cpu, xpu, hpu, mps): no PrivateUse1 device can pass.
    ("flex_attention refuses devices outside torch's list", r"FlexAttention is only supported on"),
    ("dtype-reinterpreting view read", r"rank of smaller element type|view_read"),
    ("CPU tensor beside a tpu tensor", r"Expected all tensors to be on the same device"),
    ("module parameter swap on .to()", r"Couldn't swap"),
    ("inductor / torch.compile on tpu", r"inductor|InductorError|BackendCompilerFailed|torch\._dynamo"),
    ("op not supported on tpu", r"not implemented for|NotImplementedError|no lowering|unsupported"),
    ("numerical mismatch", r"Tensor-likes are not close|not close|AssertionError: (False|True) is not|Mismatched elements|assert_close"),
    ("test timeout", r"Timeout|timed out"),
    ("out of memory", r"out of memory|RESOURCE_EXHAUSTED"),
]


def cause_of(message: str) -> str:
    for name, pattern in CAUSES:
        if re.search(pattern, message):
            return name
    return "other"
