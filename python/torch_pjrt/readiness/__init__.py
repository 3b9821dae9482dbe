"""The readiness report: will a workload run correctly on the target, and at
what cost? `python -m torch_pjrt.readiness --help`; docs/readiness.md.

A workload file uses these names (see protocol.py for the protocol)."""

from .protocol import Size, Target, Workload, final_loss, rows_close

__all__ = ["Size", "Target", "Workload", "final_loss", "rows_close"]
