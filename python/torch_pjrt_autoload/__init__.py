"""torch's device-backend autoload for torch-pjrt, opt-in.

torch calls every `torch.backends` entry point when it is imported (unless
TORCH_DEVICE_BACKEND_AUTOLOAD=0). This one imports torch_pjrt, which
registers the tpu device, when TORCH_PJRT_AUTOLOAD=1: then a program that
never imports torch_pjrt itself (`transformers serve --device tpu`,
`accelerate launch`, any script) finds the device. It lives outside the
torch_pjrt package so that, switched off, it costs one environment lookup
rather than the package's import (about a second) on every `import torch`.
"""

from __future__ import annotations

import os


def load() -> None:
    value = os.environ.get("TORCH_PJRT_AUTOLOAD", "0").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return
    if value not in ("1", "true", "yes", "on"):
        raise ValueError(f"TORCH_PJRT_AUTOLOAD={value!r}: expected 1 or 0")
    import torch_pjrt  # noqa: F401  (registers the device)
