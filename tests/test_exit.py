"""A script that ends right after a backward pass on tpu exits cleanly:
torch's autograd device thread must not be killed by interpreter
finalization while it still releases the finished graph task
(python/torch_pjrt/_exit.py). Without the fix about half such runs
aborted with "terminate called without an active exception"."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch, torch_pjrt
x = torch.randn(4, 3).to("tpu").requires_grad_()
(grad,) = torch.autograd.grad((x * x).sum(), x)
"""


def test_scripts_ending_right_after_a_backward_exit_cleanly():
    env = dict(os.environ, PYTHONFAULTHANDLER="0")
    runs = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    for run in runs:
        out, err = run.communicate(timeout=240)
        assert run.returncode == 0, err[-2000:]
        assert "terminate called" not in err
