"""The workload protocol, in process: sizes, the Workload record, loading a
workload file, the default per-task check and the budget parser."""

from __future__ import annotations

import argparse

import pytest
import torch

from torch_pjrt.readiness import Size, Target, Workload, final_loss, rows_close
from torch_pjrt.readiness.cli import parse_budget, parse_price
from torch_pjrt.readiness.protocol import load_file


def test_size_parse_and_print():
    assert Size.parse("8x128") == Size(8, 128) and str(Size(8, 128)) == "8x128"
    assert Size.parse(" 2X16 ") == Size(2, 16)
    for bad in ("8", "0x4", "8x", "axb", "-1x4"):
        with pytest.raises(ValueError, match="BATCHxLENGTH"):
            Size.parse(bad)


def _workload(**kwargs) -> Workload:
    return Workload(name="w", kind=kwargs.pop("kind", "train"), build=lambda t: (lambda x: x),
                    data=lambda s: [], **kwargs)


def test_workload_defaults_and_validation():
    w = _workload(sizes=["4x8"], target=1.0)
    assert w.sizes == [Size(4, 8)] and w.metric_name.startswith("final loss")
    assert w.reached(0.9) and not w.reached(1.1) and not w.reached(float("nan"))
    assert w.tasks(Size(4, 8)) == 4 and w.tokens(Size(4, 8)) == 32
    up = _workload(target=0.8, higher_is_better=True)
    assert up.reached(0.9) and not up.reached(0.7)
    with pytest.raises(ValueError, match="kind must be one of"):
        _workload(kind="serve")
    with pytest.raises(ValueError, match="at least one size"):
        _workload(sizes=[])
    assert final_loss([torch.tensor(4.0), torch.tensor(3.0), torch.tensor(2.0), torch.tensor(1.0)]) == 2.0


def test_rows_close_per_task():
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    got = expected.clone()
    got[1, 0] += 1e-2
    assert rows_close(got, expected, 1e-4, 1e-5) == [True, False, True]
    assert rows_close(got[:2], expected, 1e-4, 1e-5) == [False] * 3  # a wrong shape fails every task
    assert rows_close(torch.tensor([1, 2]), torch.tensor([1, 3]), 0, 0) == [True, False]


def test_target_compiles_only_in_the_compiled_mode():
    fn = lambda x: x + 1  # noqa: E731
    assert Target(torch.device("cpu"), "eager").compile(fn) is fn
    compiled = Target(torch.device("cpu"), "compiled", backend="eager").compile(fn)
    assert compiled is not fn and compiled(torch.ones(1)).item() == 2.0


def test_load_file(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("from torch_pjrt.readiness import Workload\n"
                    "WORKLOAD = Workload(name='g', kind='infer', build=lambda t: None, data=lambda s: [])\n")
    assert load_file(str(good)).name == "g"
    none = tmp_path / "none.py"
    none.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines workload"):
        load_file(str(none))
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def workload():\n    return 3\n")
    with pytest.raises(TypeError, match="not a torch_pjrt.readiness.Workload"):
        load_file(str(wrong))
    with pytest.raises(FileNotFoundError):
        load_file(str(tmp_path / "missing.py"))


def test_budget_and_price_parsing():
    assert parse_budget("90s") == 90 and parse_budget("5m") == 300 and parse_budget("1.5h") == 5400
    assert parse_budget("42") == 42 and parse_budget(None) is None
    for bad in ("0s", "soon", "5d"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_budget(bad)
    assert parse_price("tpu=1.20") == ("tpu", 1.2)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_price("tpu:1")
