"""torch.distributed on the tpu device.

`import torch_pjrt` registers the c10d backend "tpu" (and "tpu_dist", the
name transformers asks for), so the standard APIs work unchanged::

    dist.init_process_group("tpu")                     # or "cpu:gloo,tpu:tpu"
    dist.init_process_group(device_id=torch.device("tpu", local_rank))

The backend is C++ (csrc/distributed). Which transport a group uses is
decided when it is created: XLA collective programs when every rank of the
group lives in this process (ranks as threads, see `run_threads`), the host
transport (device -> host -> gloo -> device) when ranks are processes on a
plugin that cannot cross processes (the XLA CPU plugin).
"""

from __future__ import annotations

from ._backend import BACKEND_NAMES, register, transport
from ._threads import run_threads

__all__ = ["BACKEND_NAMES", "register", "run_threads", "transport"]
