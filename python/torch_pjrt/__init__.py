"""torch-pjrt: PyTorch on any PJRT device (TPU, GPU, the XLA CPU plugin).

Importing the package reads the settings and prepares the runtime; the
plugin itself is loaded on first use.
"""

from __future__ import annotations

import torch  # noqa: F401  (libtorch must be loaded before the extension)

from . import _C
from ._metrics import metrics, reset_metrics
from ._settings import Settings, settings
from ._C import PjrtError
from . import runtime

__version__ = "0.1.0"

__all__ = ["PjrtError", "Settings", "metrics", "reset_metrics", "runtime", "settings"]
