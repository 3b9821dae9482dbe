"""Ops that used to split a compiled graph, or fail it, and now run inside
the program: random distributions, ops taking a Python scalar where torch's
decompositions end in prims, unfold, logcumsumexp; linalg ops whose error
check is a side effect (with_effects); and ops whose auxiliary outputs are
shaped differently on CPU and in torch's meta functions (embedding_bag,
log_sigmoid). Results are compared with CPU PyTorch (values, gradients,
error types) and random draws with eager mode's under the same seed; eager
nodes are read from compile_report() and CPU fallbacks from metrics()."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

NAME = torch_pjrt.settings().device_name

pytestmark = pytest.mark.usefixtures("fresh_compile_state")


def eager_nodes() -> list[dict]:
    return [g["eager_ops"] for g in torch_pjrt.compile_report()]


_DRAWS = {
    "exponential_": lambda x: torch.empty_like(x).exponential_(2.5) + x,
    "geometric_": lambda x: torch.empty_like(x).geometric_(0.3) * x,
    "log_normal_": lambda x: torch.empty_like(x).log_normal_(0.5, 0.25) - x,
    "cauchy_": lambda x: torch.empty_like(x).cauchy_(1.0, 2.0) + x,
    "normal_tensor_tensor": lambda x: torch.normal(x, x.abs() + 1),
    "normal_tensor_float": lambda x: torch.normal(x * 2, 0.5),
    "normal_float_tensor": lambda x: torch.normal(3.0, x.abs()),
    "bernoulli_p": lambda x: torch.bernoulli(x.sigmoid(), 0.3) + x,
    "rrelu_training": lambda x: F.rrelu(x * 3, 0.1, 0.4, training=True),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.4, training=True),
}


@pytest.mark.parametrize("case", sorted(_DRAWS))
def test_random_distributions_stay_in_the_program_with_eagers_draws(case):
    """One draw per graph: the same seed gives eager mode's numbers (to an
    ulp where XLA fuses the transform with its consumer), and each call
    draws new ones."""
    fn = _DRAWS[case]
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).to(NAME)
    torch.manual_seed(11)
    eager = fn(x).cpu()
    torch.manual_seed(11)
    step = torch.compile(fn, backend="tpu")
    first, second = step(x).cpu(), step(x).cpu()
    assert first.dtype == eager.dtype and first.shape == eager.shape
    torch.testing.assert_close(first, eager, rtol=1e-5, atol=1e-5)
    assert not torch.equal(first, second)
    assert eager_nodes() == [{}]
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_distribution_draws_have_their_distributions_moments():
    """Compiled draws from the device generator, checked against the
    distributions' means (64k samples; 5-sigma bounds)."""
    def draws(x):
        return (torch.empty_like(x).exponential_(2.0), torch.empty_like(x).geometric_(0.25),
                torch.empty_like(x).log_normal_(0.0, 0.5), torch.normal(x, 2.0))

    x = torch.zeros(1 << 16, device=NAME)
    exp, geo, lognormal, normal = (t.cpu().double() for t in torch.compile(draws, backend="tpu")(x))
    n = x.numel()
    assert abs(exp.mean() - 0.5) < 5 * 0.5 / n ** 0.5 and exp.min() >= 0
    assert abs(geo.mean() - 4.0) < 5 * (0.75 ** 0.5 / 0.25) / n ** 0.5 and geo.min() >= 1
    assert torch.equal(geo, geo.round())
    mean_ln = torch.exp(torch.tensor(0.125, dtype=torch.float64))
    assert abs(lognormal.mean() - mean_ln) < 0.02 and lognormal.min() > 0
    assert abs(normal.mean()) < 5 * 2.0 / n ** 0.5 and abs(normal.std() - 2.0) < 0.05


_SCALAR_FORMS = {
    "copysign_scalar": lambda x: torch.copysign(x, -1.5) + 1,
    "copysign_int_scalar": lambda x: torch.copysign((x * 4).int(), -2) * 1,
    "remainder_scalar_tensor": lambda x: torch.remainder(3.5, x) + 1,
    "remainder_int_scalar_tensor": lambda x: torch.remainder(7, (x * 4).int() | 1) * 1,
    "xlogy_scalar_self": lambda x: torch.xlogy(2.0, x.abs()) + 1,
    "round_decimals": lambda x: torch.round(x * 37, decimals=2) + 1,
    "round_negative_decimals": lambda x: torch.round(x * 3000, decimals=-2) * 1,
    "logcumsumexp": lambda x: torch.logcumsumexp(x * 30, 1) + 1,
    "logcumsumexp_dim0": lambda x: torch.logcumsumexp(x, -2) * 2,
    "unfold": lambda x: x.unfold(1, 2, 1) * 2,
    "unfold_step": lambda x: (x * 2).unfold(1, 2, 2).sum(-1),
    "unfold_dim0": lambda x: x.unfold(0, 3, 1) + 1,
    "unfold_3d": lambda x: x.reshape(3, 1, 5).unfold(2, 4, 1) - 1,
}


@pytest.mark.parametrize("case", sorted(_SCALAR_FORMS))
def test_scalar_forms_unfold_and_logcumsumexp_stay_in_the_program(case):
    fn = _SCALAR_FORMS[case]
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    got = torch.compile(fn, backend="tpu")(x.to(NAME))
    expected = fn(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert eager_nodes() == [{}]


def test_unfold_gradient_in_one_forward_and_one_backward_program():
    def fn(x):
        return (x.unfold(1, 3, 2) ** 2).sum()

    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(2))
    xc = x.clone().requires_grad_()
    fn(xc).backward()
    xd = x.to(NAME).requires_grad_()
    torch.compile(fn, backend="tpu")(xd).backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert eager_nodes() == [{}, {}]


def test_eager_scalar_remainder_and_inplace_rrelu_run_on_the_device():
    """Both went to the CPU fallback in eager mode."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3))
    got = torch.remainder(2.5, x.to(NAME))
    torch.testing.assert_close(got.cpu(), torch.remainder(2.5, x))
    noise = torch.empty(4, 6, device=NAME)
    y = x.to(NAME)
    torch.ops.aten.rrelu_with_noise_(y, noise, 0.1, 0.3, True)
    negative = x < 0
    slopes = noise.cpu()
    assert torch.all((slopes[negative] >= 0.1) & (slopes[negative] <= 0.3))
    assert torch.all(slopes[~negative] == 1)
    torch.testing.assert_close(y.cpu(), x * slopes)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def _well_conditioned(n: int = 4, seed: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, n, generator=g) + 3 * torch.eye(n)


_LINALG = {
    "inv": (lambda a: torch.linalg.inv(a) * 2, lambda: (_well_conditioned(),)),
    "solve": (lambda a, b: torch.linalg.solve(a, b) + 1,
              lambda: (_well_conditioned(), torch.randn(4, 2, generator=torch.Generator().manual_seed(5)))),
    "cholesky": (lambda a: torch.linalg.cholesky(a @ a.mT + torch.eye(4, device=a.device)),
                 lambda: (_well_conditioned(),)),
}


@pytest.mark.parametrize("case", sorted(_LINALG))
def test_linalg_with_error_checks_compiles_and_differentiates(case):
    """The ops' error check is an effectful node (with_effects) that used to
    break the graph's lowering: it now runs beside the program."""
    fn, make = _LINALG[case]
    cpu = [t.clone().requires_grad_() for t in make()]
    dev = [t.to(NAME).requires_grad_() for t in make()]
    expected = fn(*cpu)
    got = torch.compile(fn, backend="tpu")(*dev)
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    expected.sum().backward()
    got.sum().backward()
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)
    forward = [g for g in torch_pjrt.compile_report() if g["kind"] == "forward"]
    assert forward and forward[0]["eager_ops"] == {"with_effects": 1}


def test_singular_matrix_raises_linalg_error_as_on_cpu():
    fn = torch.compile(lambda a: torch.linalg.inv(a) + 1, backend="tpu")
    fn(_well_conditioned().to(NAME)).cpu()
    singular = torch.zeros(4, 4)
    with pytest.raises(torch.linalg.LinAlgError) as cpu_error:
        torch.linalg.inv(singular)
    with pytest.raises(type(cpu_error.value), match="singular"):
        fn(singular.to(NAME)).cpu()


_BAGS = {
    "sum": dict(mode="sum"),
    "mean": dict(mode="mean"),
    "max": dict(mode="max"),
    "sum_last_offset": dict(mode="sum", include_last_offset=True),
    "mean_last_offset": dict(mode="mean", include_last_offset=True),
    "max_last_offset": dict(mode="max", include_last_offset=True),
    "sum_padding": dict(mode="sum", padding_idx=2),
    "mean_padding": dict(mode="mean", padding_idx=2),
    "per_sample_weights": dict(mode="sum", per_sample_weights=True),
}


@pytest.mark.parametrize("case", sorted(_BAGS))
def test_embedding_bag_compiles_forward_and_backward(case):
    """Compiled graphs are checked against torch's meta functions, whose
    auxiliary outputs (offset2bag, bag_size, max_indices) follow CUDA's
    shapes, not CPU's that eager mode returns; this used to fail."""
    kwargs = dict(_BAGS[case])
    g = torch.Generator().manual_seed(6)
    weight = torch.randn(10, 4, generator=g)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 3, 8]) if kwargs.get("include_last_offset") else torch.tensor([0, 4])
    psw = torch.rand(8, generator=g) if kwargs.pop("per_sample_weights", False) else None

    def fn(w, i, o, p):
        return F.embedding_bag(i, w, o, per_sample_weights=p, **kwargs) * 1.5

    wc = weight.clone().requires_grad_()
    expected = fn(wc, indices, offsets, psw)
    expected.square().sum().backward()
    wd = weight.to(NAME).requires_grad_()
    got = torch.compile(fn, backend="tpu")(wd, indices.to(NAME), offsets.to(NAME),
                                           None if psw is None else psw.to(NAME))
    got.square().sum().backward()
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-6)
    assert all(e == {} for e in eager_nodes())


@pytest.mark.parametrize("case", ["logsigmoid", "bce_with_logits_pos_weight"])
def test_log_sigmoid_compiles_forward_and_backward(case):
    """log_sigmoid's buffer output: empty in eager mode (as on CUDA), shaped
    as its input in the meta function a graph is checked against."""
    def fn(x, t):
        if case == "logsigmoid":
            return F.logsigmoid(x * 2).sum()
        pos_weight = torch.full((5,), 3.0, device=x.device)
        return F.binary_cross_entropy_with_logits(x, t, pos_weight=pos_weight)

    g = torch.Generator().manual_seed(7)
    x, t = torch.randn(3, 5, generator=g), torch.rand(3, 5, generator=g)
    xc = x.clone().requires_grad_()
    expected = fn(xc, t)
    expected.backward()
    xd = x.to(NAME).requires_grad_()
    got = torch.compile(fn, backend="tpu")(xd, t.to(NAME))
    got.backward()
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert all(e == {} for e in eager_nodes())
