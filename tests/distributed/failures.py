"""Ranks that disagree or stop: every case must end in a Python exception on
the surviving ranks within the group's timeout, never a hang or an abort.

    torchrun --nproc-per-node 2 tests/distributed/failures.py OUT_DIR CASE

Each rank writes OUT_DIR/rank<r>.json: the exception type, its message and
how long the failing call took.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def case_shapes(rank: int) -> None:
    t = torch.ones(4 if rank == 0 else 8, device="tpu")
    dist.all_reduce(t)
    t.cpu()


def case_dtypes(rank: int) -> None:
    t = torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int64, device="tpu")
    dist.all_gather_into_tensor(torch.empty(8, dtype=t.dtype, device="tpu"), t)


def case_reduce_op(rank: int) -> None:
    dist.all_reduce(torch.ones(4, device="tpu"), op=dist.ReduceOp.BAND)


def case_rank_exits(rank: int) -> None:
    # Both ranks finish setting up the group (its gloo connections) first:
    # the case is a rank dying mid-run, not during init_process_group.
    dist.barrier()
    if rank == 1:
        os._exit(0)  # a rank that dies without a word
    time.sleep(0.5)
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t)
    t.cpu()


def case_never_called(rank: int) -> None:
    if rank == 0:
        dist.all_reduce(torch.ones(4, device="tpu"))
    else:
        time.sleep(8)  # alive, but never joins


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main() -> None:
    import torch_pjrt  # noqa: F401

    out, case = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    torch.tpu.set_device(device)
    dist.init_process_group("tpu", device_id=device, timeout=timedelta(seconds=4))
    start = time.monotonic()
    report = {"error": None}
    try:
        CASES[case](rank)
    except Exception as error:
        report = {"error": type(error).__name__, "message": str(error).splitlines()[0],
                  "is_runtime_error": isinstance(error, RuntimeError)}
    report["seconds"] = time.monotonic() - start
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    os._exit(0)  # the group may be broken; do not wait for it at exit


if __name__ == "__main__":
    main()
