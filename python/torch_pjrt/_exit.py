"""What torch_pjrt does when the interpreter exits: finish work in flight on
the device, and let torch's autograd device threads finish with the last
graph task before finalization can kill them."""

from __future__ import annotations

import os
import time

from . import _C


def drain_at_exit() -> None:
    # Work still in flight when the interpreter exits would finish on plugin
    # threads after torch's own teardown; wait for it first.
    if _C._runtime_initialized():
        try:
            _C._synchronize(-1)
        except Exception:  # an error of unread work; nothing left to tell
            pass
        _let_autograd_threads_settle()


def _let_autograd_threads_settle() -> None:
    # torch's autograd engine runs a device graph's backward on a thread of
    # its own, which drops its reference to the finished graph task (and the
    # Python objects that task holds, which needs the GIL) just after the
    # caller got its gradients. A script that ends right after a backward
    # can finalize the interpreter in that window; the thread is then killed
    # inside a noexcept frame and the process aborts ("terminate called
    # without an active exception"). Giving up the GIL for a moment at exit,
    # while the interpreter still runs, lets such a thread finish first.
    if any(name.startswith("pt_autograd_") for name in _thread_names()):
        time.sleep(0.02)


def _thread_names() -> list[str]:
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # not Linux: assume the engine's threads may exist
        return ["pt_autograd_"]
    names = []
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names
