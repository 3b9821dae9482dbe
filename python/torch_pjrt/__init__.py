"""torch-pjrt: PyTorch on any PJRT device (TPU, GPU, the XLA CPU plugin).

`import torch_pjrt` registers the device (named by TORCH_PJRT_DEVICE_NAME,
default "tpu"), its torch.<name> module and the tensor/module methods, and
starts the PJRT runtime the settings select.
"""

from __future__ import annotations

import atexit
import sys
import warnings

import torch

from . import _C
from ._C import PjrtError
from ._metrics import metrics, reset_metrics
from ._compile import compile_report, explain, reset_compile_report
from ._settings import Settings, settings
from ._eager_mode import eager_mode, flush_pending, get_eager_mode, set_eager_mode
from . import runtime
from ._exit import drain_at_exit
from .kernels import jax_op, stablehlo_op


def _register_device() -> None:
    name = settings().device_name
    torch.utils.rename_privateuse1_backend(name)
    from . import _device_module

    torch._register_device_module(name, _device_module)
    sys.modules[f"torch.{name}"] = _device_module
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True
    )
    # TPUs compute in bfloat16: torch.autocast(name) defaults to it.
    torch.set_autocast_dtype(name, torch.bfloat16)
    # Module.to(device) keeps each Parameter object (and so tied weights)
    # because the extension tells torch that CPU and tpu dense tensors are
    # shallow-copy compatible (csrc/backend/shallow_copy.cc), as CUDA's are.
    from . import _accelerate, _fused_optim
    from ._compile import default_backend

    _fused_optim.register()
    _accelerate.install(name)
    default_backend.install()
    if torch.distributed.is_available():
        from . import distributed

        distributed.register()


def _start_runtime() -> None:
    try:
        runtime.ensure_initialized()
    except Exception as error:  # keep `import` working; device use reports why
        _C._set_init_error(f"{type(error).__name__}: {error}")
        warnings.warn(f"torch_pjrt: no device available: {error}", RuntimeWarning, stacklevel=3)


_register_device()
_start_runtime()
atexit.register(drain_at_exit)
from . import _eager_mode  # noqa: E402

_eager_mode.install_optimizer_hook()

# experts_implementation="torch_pjrt" in Transformers, once it is imported.
from ._import_hooks import when_imported  # noqa: E402
from .kernels.moe_experts import register_transformers_experts  # noqa: E402

when_imported("transformers.integrations.moe", register_transformers_experts)

# Ops with no lowering that torch can decompose run on tpu that way.
from . import decompositions as _decompositions  # noqa: E402

_decompositions.install()

# scaled_dot_product_attention picks the flash kernel where it is faster.
from .kernels import sdpa as _sdpa  # noqa: E402

_sdpa.install()

# The package's kernels registered now, not while torch.compile traces a caller.
from .kernels import prepare_package_kernels as _prepare_package_kernels  # noqa: E402

_prepare_package_kernels()

# torch.compile of a float32 MoE model: _grouped_mm's meta as wide as its kernels.
from ._compile import grouped_mm_meta as _grouped_mm_meta  # noqa: E402

_grouped_mm_meta.install()

# generate() on tpu checks whether to stop one step late, never waiting on the device.
from . import _deferred_stop_check  # noqa: E402

_deferred_stop_check.install()

# Transformers' continuous batching (generate_batch, transformers serve
# --continuous-batching) with a bounded set of programs on the device.
from . import _serving  # noqa: E402

_serving.install()

__version__ = "0.1.0"

__all__ = ["PjrtError", "Settings", "compile_report", "eager_mode", "explain", "flush_pending",
           "get_eager_mode", "jax_op", "metrics", "reset_compile_report", "reset_metrics", "runtime",
           "set_eager_mode", "settings", "stablehlo_op"]
