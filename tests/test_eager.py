"""Strict and debug eager execution: compile counts and their reasons,
runtime scalars, the CPU fallback, and errors that match CPU PyTorch."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name


def compiles_during(fn) -> tuple[int, dict]:
    torch_pjrt.reset_metrics()
    fn()
    m = torch_pjrt.metrics()
    # A program found on disk was built in this process too; count both.
    return m["compilations"] + m["cache_hits_disk"], m["recompile_reasons"]


def test_a_loop_of_the_same_ops_compiles_once():
    x = torch.randn(16, 16).to(NAME)
    w = torch.randn(16, 16).to(NAME)

    def step():
        return torch.tanh(x @ w + 1).sum()

    step()  # warm
    count, _ = compiles_during(lambda: [step() for _ in range(20)])
    assert count == 0
    assert torch_pjrt.metrics()["cache_hits_memory"] >= 20 * 4  # mm, add, tanh, sum


def test_changing_python_scalars_do_not_recompile():
    x = torch.randn(8).to(NAME)
    x * 0.5 + 1  # warm: a float and an int scalar
    count, _ = compiles_during(lambda: [x * (0.1 * i) + i for i in range(1, 50)])
    assert count == 0
    y = x.clone()
    count, _ = compiles_during(lambda: [y.fill_(float(i)) for i in range(10)])
    assert count <= 1  # the first fill_ of this shape, if not seen before


@pytest.mark.strict_only
def test_a_new_shape_recompiles_and_says_why():
    torch.randn(5, 3).to(NAME).exp()  # the op is known
    count, reasons = compiles_during(lambda: torch.randn(7, 3).to(NAME).exp())
    assert count >= 1
    assert reasons.get("new shape: aten::exp", 0) == 1, reasons
    count, reasons = compiles_during(lambda: torch.randn(7, 3).to(NAME).double().exp())
    assert reasons.get("new dtype: aten::exp", 0) == 1, reasons


def test_argument_positions_are_part_of_the_key():
    x = torch.linspace(-3, 3, 7).to(NAME)
    bound = torch.zeros(7).to(NAME)
    low = torch.clamp(x, min=bound)
    high = torch.clamp(x, max=bound)
    assert torch.equal(low.cpu(), x.cpu().clamp(min=0))
    assert torch.equal(high.cpu(), x.cpu().clamp(max=0))


def test_debug_mode_runs_and_waits(python_in_subprocess):
    result = python_in_subprocess(
        f"""
        import torch, torch_pjrt
        assert torch_pjrt.settings().eager == "debug"
        x = torch.arange(6.0).reshape(2, 3).to("{NAME}")
        print(((x @ x.t()) + 1).cpu().tolist())
        """,
        {"TORCH_PJRT_EAGER": "debug"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[[6.0, 15.0], [15.0, 51.0]]"


# --- CPU fallback -----------------------------------------------------------------
# aten::_add_relu (relu(x + alpha * other), with in-place and out= forms)
# has no lowering; it stands for any op without one.
ADD_RELU = torch.ops.aten._add_relu


def test_fallback_is_counted_and_correct_for_functional_in_place_and_out():
    torch_pjrt.reset_metrics()
    host = torch.arange(1.0, 13.0).reshape(3, 4)
    other = torch.full((3, 4), 2.0)
    x, o = host.to(NAME), other.to(NAME)
    want = torch.relu(host - other)
    assert torch.equal(ADD_RELU(x, o, alpha=-1).cpu(), want)
    y = x.clone()
    torch.ops.aten._add_relu_(y, o, alpha=-1)
    assert torch.equal(y.cpu(), want)
    out = torch.empty(0, device=NAME)
    ADD_RELU.out(x, o, alpha=-1, out=out)
    assert torch.equal(out.cpu(), want)
    view_base = x.clone()
    torch.ops.aten._add_relu_(view_base[1:], o[1:], alpha=-1)  # in place on a view: the base sees it
    expected = host.clone()
    expected[1:] = want[1:]
    assert torch.equal(view_base.cpu(), expected)
    counts = torch_pjrt.metrics()["fallback_ops"]
    assert sum(n for op, n in counts.items() if op.startswith("aten::_add_relu")) == 4, counts


def test_fallback_refuses_mixed_devices_like_a_device_kernel():
    x = torch.arange(4.0).to(NAME)
    with pytest.raises(RuntimeError, match="same device"):
        ADD_RELU(x, torch.ones(4))  # a CPU operand that is not a scalar
    with pytest.raises(RuntimeError, match="same device.*aten::_add_relu"):
        ADD_RELU.out(x, x, out=torch.empty(4))  # the result would land on the CPU


def test_fallback_warns_once_per_op(python_in_subprocess):
    result = python_in_subprocess(
        f"""
        import warnings, torch, torch_pjrt
        # Through torch's Python bindings (torch.ops prints C++ warnings to
        # stderr instead): linalg.eigvals, whose _linalg_eigvals has no lowering.
        x = torch.eye(3).to("{NAME}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                torch.linalg.eigvals(x)
        print(sum("aten::_linalg_eigvals" in str(w.message) for w in caught))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_fallback_error_mode_names_the_op(python_in_subprocess):
    result = python_in_subprocess(
        f"""
        import torch, torch_pjrt
        x = torch.ones(5).to("{NAME}")
        try:
            torch.ops.aten._add_relu(x, x)
        except NotImplementedError as e:
            print("raised:", "aten::_add_relu" in str(e))
        print((x + 1).sum().item())
        """,
        {"TORCH_PJRT_FALLBACK": "error"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["raised:", "True", "10.0"]


# --- errors match CPU PyTorch -----------------------------------------------------------


def same_error(fn, match: str | None = None):
    """fn(device) must raise the same exception type on CPU and on the device."""
    with pytest.raises(Exception) as cpu_error:
        fn("cpu")
    with pytest.raises(Exception) as dev_error:
        fn(NAME)
    assert type(dev_error.value) is type(cpu_error.value), (
        f"CPU raised {type(cpu_error.value).__name__}, device raised "
        f"{type(dev_error.value).__name__}: {dev_error.value}"
    )
    if match:
        assert match in str(dev_error.value), str(dev_error.value)


def test_shape_mismatch():
    same_error(lambda d: torch.ones(2, 3, device=d) + torch.ones(4, device=d),
               "The size of tensor a (3) must match the size of tensor b (4)")


def test_matmul_shape_mismatch():
    same_error(lambda d: torch.ones(2, 3, device=d) @ torch.ones(4, 2, device=d),
               "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)")


def test_bad_dim():
    same_error(lambda d: torch.ones(2, 3, device=d).sum(5), "Dimension out of range")
    same_error(lambda d: torch.ones(2, 3, device=d).transpose(0, 4))


def test_dtype_mismatch():
    same_error(lambda d: torch.ones(2, 2, device=d) @ torch.ones(2, 2, dtype=torch.float64, device=d))
    same_error(lambda d: torch.ones(3, device=d).masked_fill(torch.ones(3, device=d), 0.0))


def test_item_of_many_elements():
    same_error(lambda d: torch.ones(3, device=d).item(), "cannot be converted to Scalar")


def test_mixing_devices_is_refused():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device=NAME) + torch.ones(3)


def test_errors_name_the_op_shapes_and_dtypes():
    x = torch.ones(2, 3, device=NAME)
    with pytest.raises(RuntimeError) as info:
        torch.cat([x, torch.ones(2, 4, device=NAME)], dim=0)
    assert "Sizes of tensors must match" in str(info.value)


@pytest.mark.strict_only
def test_transposed_whole_tensors_are_read_inside_the_op():
    w = torch.randn(8, 4).to(NAME)
    x = torch.randn(2, 4).to(NAME)
    x @ w.t()  # warm
    torch_pjrt.reset_metrics()
    y = x @ w.t()
    assert torch_pjrt.metrics()["executions"] == 1  # no separate view program
    torch.testing.assert_close(y.cpu(), x.cpu() @ w.cpu().t(), rtol=1e-5, atol=1e-5)


def test_in_place_updates_with_donation_keep_every_alias_right():
    x = torch.zeros(64, 64, device=NAME)
    row = x[3]
    same = x
    for _ in range(3):
        x.add_(1)  # the old buffer is only held by the storage: donated
    kept = x.clone()
    x.mul_(2)
    assert same.cpu().eq(6).all() and row.cpu().eq(6).all()
    assert kept.cpu().eq(3).all()  # the clone did not alias the donated buffer
    z = torch.ones(3, device=NAME)
    z.add_(z)  # self passed twice: must not be donated under itself
    assert z.cpu().tolist() == [2.0, 2.0, 2.0]
    m = torch.ones(4, 4, device=NAME)
    m.add_(m)  # the same for a matrix, read whole as it is stored
    assert m.cpu().eq(2).all()


@pytest.mark.strict_only
def test_in_place_update_of_a_matrix_donates_its_buffer(python_in_subprocess, tmp_path):
    """A contiguous matrix is read as its buffer, not as a view of it, so an
    in-place update on it (an optimizer's add_ on a weight) hands the old
    buffer to the program instead of keeping two copies."""
    result = python_in_subprocess("""
        import glob, os, torch, torch_pjrt
        w = torch.zeros(32, 16, device="tpu")
        w.add_(1)
        print("SUM", w.sum().item())
        add = [open(p).read() for p in glob.glob(os.environ["TORCH_PJRT_DUMP_DIR"] + "/aten__add_*.mlir")]
        print("DONOR", sum("jax.buffer_donor = true" in t.splitlines()[1] for t in add))
    """, env={"TORCH_PJRT_DUMP_DIR": str(tmp_path)})
    assert "SUM 512.0" in result.stdout, result.stdout + result.stderr
    assert "DONOR 1" in result.stdout, result.stdout + result.stderr
