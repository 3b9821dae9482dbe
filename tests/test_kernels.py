"""Kernels from JAX (Pallas included) and StableHLO as PyTorch operators:
eager on device buffers, inlined into compiled and fused programs,
autograd through jax.vjp / custom_vjp / a given vjp, and the errors a user
gets for kernels the plugin cannot run or tensors of the wrong type."""

from __future__ import annotations

import itertools

import pytest
import torch

import torch_pjrt

jax = pytest.importorskip("jax")
jnp = jax.numpy

DEV = "tpu"
_names = itertools.count()


def fresh(name: str) -> str:
    """A new op name per test: torch.library ops live for the process."""
    return f"kt::{name}_{next(_names)}"


def rms_torch(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rms_jax(x, w, eps: float = 1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def delta(before: dict, *keys: str) -> dict:
    after = torch_pjrt.metrics()
    return {k: after[k] - before[k] for k in keys}


# --- jax_op: eager ----------------------------------------------------------------

def test_jax_op_schema_from_annotations_and_eager_matches_cpu():
    op = torch_pjrt.jax_op(fresh("rms"), rms_jax)
    assert [a.name for a in op.kernel.schema.arguments] == ["x", "w", "eps"]
    assert str(op.kernel.schema.arguments[2].type) == "float"
    x, w = torch.randn(4, 16), torch.randn(16)
    torch.testing.assert_close(op(x.to(DEV), w.to(DEV)).cpu(), rms_torch(x, w), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(op(x.to(DEV), w.to(DEV), 0.5).cpu(), rms_torch(x, w, 0.5),
                               rtol=1e-5, atol=1e-5)
    # The CPU implementation runs the same JAX function.
    torch.testing.assert_close(op(x, w), rms_torch(x, w), rtol=1e-5, atol=1e-5)


def test_jax_op_lowers_once_per_types():
    op = torch_pjrt.jax_op(fresh("scale"), lambda x: x * 3)
    xs = [torch.randn(8).to(DEV) for _ in range(4)]
    nine = torch.randn(9).to(DEV)
    op(xs[0]).cpu()
    before = torch_pjrt.metrics()
    for x in xs[1:]:
        op(x).cpu()
    assert delta(before, "compilations")["compilations"] == 0
    op(nine).cpu()  # new shape: one new program
    assert delta(before, "compilations")["compilations"] == 1


def test_jax_op_several_outputs_ints_and_64_bit_types():
    def split_stats(x, k: int) -> tuple[jax.Array, jax.Array]:
        return jnp.sum(x, axis=-1) * k, jnp.argmax(x, axis=-1)

    op = torch_pjrt.jax_op(fresh("stats"), split_stats)
    x = torch.randn(5, 7, dtype=torch.float64)
    total, idx = op(x.to(DEV), 2)
    assert total.dtype == torch.float64 and idx.dtype == torch.int64  # x64 kept
    torch.testing.assert_close(total.cpu(), x.sum(-1) * 2)
    torch.testing.assert_close(idx.cpu(), x.argmax(-1))


def test_jax_op_bfloat16_and_explicit_schema():
    op = torch_pjrt.jax_op(fresh("silu_mul"), lambda a, b: jax.nn.silu(a) * b,
                           schema="(Tensor gate, Tensor up) -> Tensor")
    a, b = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(4, 8, dtype=torch.bfloat16)
    got = op(a.to(DEV), b.to(DEV))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu(), torch.nn.functional.silu(a) * b, rtol=2e-2, atol=2e-2)


def test_pallas_kernel_in_interpret_mode_runs_on_device():
    from jax.experimental import pallas as pl

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + 2 * y_ref[...]

    def pallas_add(x, y):
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=True)(x, y)

    op = torch_pjrt.jax_op(fresh("pallas_add"), pallas_add)
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    torch.testing.assert_close(op(x.to(DEV), y.to(DEV)).cpu(), x + 2 * y)


def test_wrong_types_raise_like_an_aten_op():
    op = torch_pjrt.jax_op(fresh("matvec"), lambda m, v: m @ v)
    named = r"kt::matvec_\d+: the JAX function does not accept these arguments " \
            r"\(m: float32\[3, 4\], v: float32\[5\]\)"
    with pytest.raises(RuntimeError, match=named):
        op(torch.randn(3, 4, device=DEV), torch.randn(5, device=DEV)).cpu()
    with pytest.raises(RuntimeError, match=named):
        op(torch.randn(3, 4), torch.randn(5))  # CPU: the same error
    with pytest.raises(RuntimeError, match=named):  # and while tracing for torch.compile
        torch.compile(op.op, backend="tpu", fullgraph=True)(
            torch.randn(3, 4, device=DEV), torch.randn(5, device=DEV))
    # The process is fine afterwards.
    torch.testing.assert_close(op(torch.ones(2, 2, device=DEV), torch.ones(2, device=DEV)).cpu(),
                               torch.full((2,), 2.0))


# --- jax_op: inside programs ----------------------------------------------------

def test_compiled_graph_holds_the_kernel():
    op = torch_pjrt.jax_op(fresh("rms"), rms_jax)

    def f(x, w):
        return op(x * 2, w) + 1

    x, w = torch.randn(4, 16, device=DEV), torch.randn(16, device=DEV)
    explained = torch._dynamo.explain(f)(x, w)
    assert explained.graph_break_count == 0
    compiled = torch.compile(f, backend="tpu")
    compiled(x, w).cpu()
    before = torch_pjrt.metrics()
    got = compiled(x, w).cpu()  # the graph runs when its result is read
    d = delta(before, "executions", "compile_graph_eager_nodes", "compilations")
    # One program: the kernel is a call inside it, no eager region around it.
    assert d == {"executions": 1, "compile_graph_eager_nodes": 0, "compilations": 0}
    torch.testing.assert_close(got, rms_torch(x.cpu() * 2, w.cpu()) + 1, rtol=1e-5, atol=1e-5)


def test_compiled_program_text_calls_the_kernel(python_in_subprocess, tmp_path):
    result = python_in_subprocess("""
        import glob, os, torch, torch_pjrt, jax
        op = torch_pjrt.jax_op("ktsub::twice", lambda x: x * 2)
        f = torch.compile(lambda x: op(x) + 1, backend="tpu")
        f(torch.ones(4, device="tpu")).cpu()
        texts = [open(p).read() for p in glob.glob(os.environ["TORCH_PJRT_DUMP_DIR"] + "/*.mlir")]
        graph = [t for t in texts if "callee = @k_ktsub__twice" in t and "stablehlo.add" in t
                 and "func.func private @k_ktsub__twice" in t]
        print("INLINED", len(graph))
    """, env={"TORCH_PJRT_DUMP_DIR": str(tmp_path)})
    assert "INLINED 1" in result.stdout, result.stdout + result.stderr


def test_fused_eager_inlines_the_kernel():
    op = torch_pjrt.jax_op(fresh("rms"), rms_jax)
    x, w = torch.randn(4, 16), torch.randn(16)
    with torch_pjrt.eager_mode("fused"):
        before = torch_pjrt.metrics()
        y = (op(x.to(DEV) + 1, w.to(DEV)) * 3).cpu()
        d = delta(before, "fused_graphs_run", "fused_ops_recorded")
    assert d["fused_graphs_run"] >= 1 and d["fused_ops_recorded"] >= 3
    torch.testing.assert_close(y, rms_torch(x + 1, w) * 3, rtol=1e-5, atol=1e-5)


# --- jax_op: autograd -------------------------------------------------------------

def test_gradients_from_jax_vjp_match_torch():
    op = torch_pjrt.jax_op(fresh("rms"), rms_jax)
    x, w = torch.randn(4, 16), torch.randn(16)
    xt, wt = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    (op(xt, wt) * torch.arange(16.0, device=DEV)).sum().backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (rms_torch(xc, wc) * torch.arange(16.0)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)


def test_custom_vjp_rule_is_respected():
    @jax.custom_vjp
    def clip_grad(x):
        return x * 1.0

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))
    op = torch_pjrt.jax_op(fresh("clip_grad"), lambda x: clip_grad(x))
    x = torch.randn(10, device=DEV, requires_grad=True)
    g = torch.linspace(-2, 2, 10)
    op(x).backward(g.to(DEV))
    torch.testing.assert_close(x.grad.cpu(), g.clamp(-0.5, 0.5))


def test_user_vjp_replaces_jax_vjp():
    # A straight-through estimator: forward rounds, backward passes through.
    op = torch_pjrt.jax_op(fresh("ste_round"), lambda x: jnp.round(x), vjp=lambda x, g: (g,))
    x = torch.randn(6, device=DEV, requires_grad=True)
    op(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.ones(6))


def test_compiled_training_step_through_the_kernel():
    op = torch_pjrt.jax_op(fresh("rms"), rms_jax)
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    norm_w = torch.nn.Parameter(torch.ones(16))
    ref_lin = torch.nn.Linear(16, 16)
    ref_lin.load_state_dict(lin.state_dict())
    lin.to(DEV)
    norm_w_dev = torch.nn.Parameter(norm_w.detach().to(DEV))
    x = torch.randn(8, 16)

    @torch.compile(backend="tpu")
    def loss_fn(x):
        return op(lin(x), norm_w_dev).pow(2).mean()

    loss = loss_fn(x.to(DEV))
    loss.backward()
    ref = rms_torch(ref_lin(x), norm_w).pow(2).mean()
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lin.weight.grad.cpu(), ref_lin.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(norm_w_dev.grad.cpu(), norm_w.grad, rtol=1e-4, atol=1e-5)


def _cache_update(cache, new, pos: int):
    return jax.lax.dynamic_update_slice(cache, new, (pos, 0))


def test_donated_first_argument_is_updated_in_place():
    op = torch_pjrt.jax_op(fresh("cache_update"), _cache_update, donate_argnums=(0,))
    assert str(op.kernel.schema).endswith("(Tensor(a!) cache, Tensor new, int pos) -> Tensor(a!)")
    cache = torch.zeros(16, 8, device=DEV)
    view = cache[4:8]  # shares the storage: sees the update, as with any in-place op
    out = op(cache, torch.ones(2, 8, device=DEV), 5)
    assert out is cache
    expected = torch.zeros(16, 8)
    expected[5:7] = 1
    torch.testing.assert_close(cache.cpu(), expected)
    torch.testing.assert_close(view.cpu(), expected[4:8])
    c = torch.zeros(16, 8)  # CPU: the same in-place update
    op(c, torch.ones(2, 8), 5)
    torch.testing.assert_close(c, expected)


def test_donated_buffer_goes_to_the_program(python_in_subprocess, tmp_path):
    result = python_in_subprocess("""
        import glob, os, torch, torch_pjrt, jax
        def upd(cache, new, pos: int):
            return jax.lax.dynamic_update_slice(cache, new, (pos, 0))
        op = torch_pjrt.jax_op("ktdon::upd", upd, donate_argnums=(0,))
        cache = torch.zeros(64, 64, device="tpu")
        op(cache, torch.ones(1, 64, device="tpu"), 3)
        print("SUM", cache.sum().item())
        texts = [open(p).read() for p in glob.glob(os.environ["TORCH_PJRT_DUMP_DIR"] + "/*.mlir")]
        mine = [t for t in texts if "k_ktdon__upd" in t]
        print("DONOR", sum("jax.buffer_donor = true" in t.splitlines()[1] for t in mine))
    """, env={"TORCH_PJRT_DUMP_DIR": str(tmp_path)})
    assert "SUM 64.0" in result.stdout, result.stdout + result.stderr
    assert "DONOR 1" in result.stdout, result.stdout + result.stderr


def test_donation_under_compile_and_fused():
    op = torch_pjrt.jax_op(fresh("cache_update"), _cache_update, donate_argnums=(0,))
    expected = torch.zeros(4, 4)
    expected[1] = 1

    @torch.compile(backend="tpu")
    def step(cache, new):
        op(cache, new, 1)
        return cache * 2

    cache = torch.zeros(4, 4, device=DEV)
    torch.testing.assert_close(step(cache, torch.ones(1, 4, device=DEV)).cpu(), expected * 2)
    torch.testing.assert_close(cache.cpu(), expected)
    with torch_pjrt.eager_mode("fused"):
        cache = torch.zeros(4, 4, device=DEV)
        op(cache, torch.ones(1, 4, device=DEV), 1)
        torch.testing.assert_close(cache.cpu(), expected)


def test_donation_errors():
    with pytest.raises(NotImplementedError, match="only the first argument"):
        torch_pjrt.jax_op(fresh("inc"), lambda x, y: x + y, donate_argnums=(1,))
    op = torch_pjrt.jax_op(fresh("total"), lambda x: x.sum(), donate_argnums=(0,))
    with pytest.raises(RuntimeError, match=r"donates 'x' \(float32\[3\]\).*float32\[\]"):
        op(torch.ones(3, device=DEV))
    upd = torch_pjrt.jax_op(fresh("cache_update"), _cache_update, donate_argnums=(0,))
    with pytest.raises(RuntimeError, match="no gradient flows"):
        upd(torch.zeros(4, 4, device=DEV, requires_grad=True), torch.ones(1, 4, device=DEV), 0)


# --- kernels the plugin cannot run -----------------------------------------------

def test_lapack_custom_call_refused_with_its_name_and_the_plugin():
    op = torch_pjrt.jax_op(fresh("cholesky"), lambda a: jnp.linalg.cholesky(a))
    a = torch.eye(3, device=DEV)
    with pytest.raises(RuntimeError, match=r"lapack.*cpu|cpu.*lapack"):
        op(a).cpu()


def test_python_callback_refused():
    def f(x):
        return jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    op = torch_pjrt.jax_op(fresh("callback"), f)
    with pytest.raises(RuntimeError, match="callback"):
        op(torch.ones(3, device=DEV)).cpu()


def test_mosaic_custom_call_refused_at_registration():
    text = """
    module {
      func.func public @main(%x: tensor<8xf32>) -> tensor<8xf32> {
        %y = stablehlo.custom_call @tpu_custom_call(%x) {backend_config = "{}"} : (tensor<8xf32>) -> tensor<8xf32>
        return %y : tensor<8xf32>
      }
    }"""
    with pytest.raises(RuntimeError, match="tpu_custom_call.*'cpu'"):
        torch_pjrt.stablehlo_op(fresh("mosaic"), text)


# --- stablehlo_op ------------------------------------------------------------------

ADD_ONE = """
module @m attributes {mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<4xf32> {jax.buffer_donor = true}, %s: tensor<f32>) -> (tensor<4xf32> {jax.result_info = "r"}) {
    %b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %y = call @helper(%x, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func private @helper(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %y = stablehlo.add %a, %b : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
"""


def test_stablehlo_text_op_eager_compiled_and_fused():
    op = torch_pjrt.stablehlo_op(fresh("add_s"), ADD_ONE).op
    x, s = torch.arange(4.0), torch.tensor(2.5)
    torch.testing.assert_close(op(x.to(DEV), s.to(DEV)).cpu(), x + 2.5)
    compiled = torch.compile(lambda a, b: op(op(a, b), b), backend="tpu")
    torch.testing.assert_close(compiled(x.to(DEV), s.to(DEV)).cpu(), x + 5)
    with torch_pjrt.eager_mode("fused"):
        torch.testing.assert_close(op(op(x.to(DEV), s.to(DEV)), s.to(DEV)).cpu(), x + 5)


@pytest.mark.parametrize("x,s,match", [
    (torch.arange(5.0), torch.tensor(1.0), r"argument 0.*tensor<5xf32>.*tensor<4xf32>"),
    (torch.arange(4), torch.tensor(1.0), r"argument 0.*torch.int64"),
    (torch.arange(4.0), torch.ones(1), r"argument 1.*tensor<1xf32>.*tensor<f32>"),
])
def test_stablehlo_argument_types_checked(x, s, match):
    op = torch_pjrt.stablehlo_op(fresh("add_s"), ADD_ONE).op
    with pytest.raises(RuntimeError, match=match):
        op(x.to(DEV), s.to(DEV))
    with pytest.raises(RuntimeError, match=match):  # and at trace time, under compile
        torch.compile(op, backend="tpu", fullgraph=True)(x.to(DEV), s.to(DEV))


def test_stablehlo_bytecode_portable_artifact_checked_too():
    exported = jax.export.export(jax.jit(lambda a, b: a * b))(
        jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((2, 3), jnp.float32))
    data = exported.mlir_module_serialized
    assert isinstance(data, (bytes, bytearray))
    op = torch_pjrt.stablehlo_op(fresh("mul"), bytes(data)).op
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(op(a.to(DEV), b.to(DEV)).cpu(), a * b)
    with pytest.raises(RuntimeError, match="tensor<3x2xf32>"):
        op(a.t().contiguous().to(DEV), b.to(DEV))


def test_stablehlo_modules_that_cannot_be_called_are_refused():
    dynamic = ADD_ONE.replace("tensor<4xf32>", "tensor<?xf32>")
    with pytest.raises(TypeError, match="dynamic dimension"):
        torch_pjrt.stablehlo_op(fresh("dyn"), dynamic)
    with pytest.raises(torch_pjrt.kernels.KernelModuleError, match="sdy.mesh"):
        torch_pjrt.stablehlo_op(fresh("mesh"), ADD_ONE.replace(
            "  func.func public", '  sdy.mesh @mesh = <["x"=1]>\n  func.func public', 1))
    with pytest.raises(torch_pjrt.kernels.KernelModuleError):
        torch_pjrt.stablehlo_op(fresh("junk"), "not mlir")


# --- without jax -------------------------------------------------------------------

def test_import_without_jax_and_a_clear_message(python_in_subprocess):
    result = python_in_subprocess("""
        import sys
        sys.modules["jax"] = None  # as if not installed
        import torch, torch_pjrt
        op = torch_pjrt.stablehlo_op("nojax::neg", '''module {
          func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {
            %y = stablehlo.negate %x : tensor<3xf32>
            return %y : tensor<3xf32>
          }
        }''').op
        print("TEXT", op(torch.ones(3, device="tpu")).cpu().tolist())
        try:
            torch_pjrt.jax_op("nojax::f", lambda x: x)
        except ImportError as e:
            print("IMPORT", e)
    """)
    assert "TEXT [-1.0, -1.0, -1.0]" in result.stdout, result.stdout + result.stderr
    assert "IMPORT torch_pjrt.jax_op needs JAX: pip install jax==0.10.2" in result.stdout
