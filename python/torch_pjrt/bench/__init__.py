"""The benchmark harness: every workload in every mode, against CPU PyTorch
eager (and inductor, torchax) measured in the same run. See runner.py for
the command line, core.py for how a cell is measured."""

from .core import Case, CellResult, Mode, Workload, compare, run_cell, settled, spread

__all__ = ["Case", "CellResult", "Mode", "Workload", "compare", "run_cell", "settled", "spread"]
