"""`jax_op`: a JAX function (Pallas kernels included) as a PyTorch operator.

    rms = torch_pjrt.jax_op("mylib::rms", lambda x, w: x * jax.lax.rsqrt(
        jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w)
    y = rms(x, w)          # x, w on tpu: runs on their device buffers

The function is lowered with `jax.jit(...).lower` once per argument types,
its StableHLO becomes the op's kernel (see _custom_op), `jax.eval_shape`
gives the op's output types, and gradients come from `jax.vjp` (which uses
a `jax.custom_vjp` rule where the function has one) or from the `vjp`
given. jax is needed only here: importing torch_pjrt does not import it.
"""
from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Optional, Sequence

import torch

from ._custom_op import KernelOp, check_custom_calls, define_kernel_op, kernel_symbol_prefix, platform
from ._module_text import custom_calls_in, parse_module
from ._types import jax_dtype, torch_dtype

__all__ = ["jax_op", "JaxOp"]

_INSTALL = ("torch_pjrt.jax_op needs JAX: pip install jax==0.10.2 jaxlib==0.10.2 "
            "(the versions torch-pjrt tests with; `make test` installs them)")


class _LazyJax:
    """The jax module, imported at its first use (a lowering, a fake
    implementation, a CPU run), not when an op is registered: registering
    stays cheap enough to do before torch.compile traces a caller, where a
    first registration would break the caller's graph."""

    _module = None

    def __getattr__(self, name: str):
        module = _LazyJax._module
        if module is None:
            try:
                import jax
                import jax.numpy  # noqa: F401
            except ImportError as e:
                raise ImportError(_INSTALL) from e
            module = _LazyJax._module = jax
        return getattr(module, name)


@functools.cache
def jax_available() -> bool:
    """Whether jax can be imported, found without importing it (asked once)."""
    import importlib.util
    return importlib.util.find_spec("jax") is not None


def _import_jax() -> _LazyJax:
    if not jax_available():
        raise ImportError(_INSTALL)
    return _LazyJax()


def _x64(jax):
    """torch's int64 and float64 stay 64-bit inside the kernel."""
    enable = getattr(jax, "enable_x64", None)
    if enable is None:
        from jax.experimental import enable_x64 as enable
    try:
        return enable(True)
    except TypeError:
        return enable()


_STATIC_TYPES = {int: "int", float: "float", bool: "bool"}


def _schema_from_function(fn: Callable) -> str:
    """(Tensor x, Tensor w, float eps=1e-06) -> Tensor, from the annotations:
    int, float and bool parameters are static values, everything else is a
    tensor; a tuple return annotation gives one output per element."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    args = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"jax_op: {fn.__name__} takes *args/**kwargs; give an explicit schema")
        kind = _STATIC_TYPES.get(hints.get(p.name, p.annotation), "Tensor")
        text = f"{kind} {p.name}"
        if p.default is not p.empty:
            if kind == "Tensor":
                raise TypeError(f"jax_op: tensor parameter '{p.name}' has a default; give a schema")
            text += f"={p.default!r}"
        args.append(text)
    ret = hints.get("return", sig.return_annotation)
    n_out = 1
    if typing.get_origin(ret) is tuple:
        elems = typing.get_args(ret)
        n_out = len(elems) if elems and elems[-1] is not Ellipsis else 1
    rets = "Tensor" if n_out == 1 and typing.get_origin(ret) is not tuple else \
        "(" + ", ".join(["Tensor"] * n_out) + ")"
    return "(" + ", ".join(args) + ") -> " + rets


class JaxOp:
    """A registered JAX kernel: call it like a function (autograd aware), or
    use `.op` (the OpOverload) directly."""

    def __init__(self, forward: KernelOp, backward: Optional[KernelOp], donating: bool = False,
                 functional: Optional["JaxOp"] = None):
        self.kernel = forward
        self.op = forward.op
        self.backward_kernel = backward
        self.donating = donating
        self.functional = functional

    def __call__(self, *args, **kwargs):
        if self.donating and torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            raise RuntimeError(f"{self.kernel.qualname} donates its first argument (an in-place "
                               "update): no gradient flows through it; call it under "
                               "torch.no_grad() or on tensors that do not require grad")
        if self.donating and torch.compiler.is_compiling():
            return args[0].copy_(self.functional.op(*args, **kwargs))
        return self.op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"JaxOp({self.kernel.qualname})"


def _arg_kinds(schema: torch._C.FunctionSchema) -> list[bool]:
    """True for each tensor argument."""
    return [isinstance(a.type, torch.TensorType) for a in schema.arguments]


def _bind(fn: Callable, is_tensor: list[bool], statics: Sequence[Any]) -> Callable:
    """fn over the tensor arguments alone, the static ones fixed."""
    def call(*tensors):
        it_t, it_s = iter(tensors), iter(statics)
        return fn(*[next(it_t) if t else next(it_s) for t in is_tensor])
    return call


def _complete(schema: torch._C.FunctionSchema, args: Sequence[Any], kwargs: dict) -> list:
    """Every schema argument, from the call's positional and keyword
    arguments and the schema's defaults (Python kernels get only what the
    caller passed)."""
    full = list(args)
    for a in schema.arguments[len(full):]:
        if a.name in kwargs:
            full.append(kwargs[a.name])
        elif a.default_value is not None or a.has_default_value():
            full.append(a.default_value)
        else:
            raise TypeError(f"{schema.name}: missing argument '{a.name}'")
    return full


def _split(args: Sequence[Any], is_tensor: list[bool]) -> tuple[list, list]:
    tensors = [a for a, t in zip(args, is_tensor) if t]
    statics = [a for a, t in zip(args, is_tensor) if not t]
    return tensors, statics


class _Rejected:
    """Turns JAX's complaint about the arguments (a TypeError or ValueError
    while tracing: mismatched shapes, wrong dtypes) into the RuntimeError
    an aten op raises, naming the op and every argument's dtype and shape."""

    def __init__(self, qualname: str, names: list[str], types: list[tuple]):
        self.qualname, self.names, self.types = qualname, names, types

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if kind is None or not issubclass(kind, (TypeError, ValueError)):
            return False
        described = ", ".join(f"{n}: {str(d).replace('torch.', '')}{list(s)}"
                              for n, (d, s) in zip(self.names, self.types))
        raise RuntimeError(f"{self.qualname}: the JAX function does not accept these arguments "
                           f"({described}): {error}") from error


def _tensor_names(parsed, is_tensor: list[bool]) -> list[str]:
    return [a.name for a, t in zip(parsed.arguments, is_tensor) if t]


def _lowerer(jax, qualname: str, fn: Callable, is_tensor: list[bool], names: list[str]):
    def lower(args: list):
        tensors, statics = _split(args, is_tensor)
        structs = [jax.ShapeDtypeStruct(tuple(shape), jax_dtype(dtype)) for dtype, shape in tensors]
        with _x64(jax), _Rejected(qualname, names, tensors):
            # For the plugin's platform, not JAX's default backend: on TPU a
            # ragged_dot stays one op and a Pallas kernel becomes Mosaic.
            traced = jax.jit(_bind(fn, is_tensor, statics), keep_unused=True).trace(*structs)
            lowered = traced.lower(lowering_platforms=(platform(),))
            try:
                text = lowered.as_text(debug_info=False)
            except TypeError:
                text = lowered.as_text()
        # Refused first by what they call: a callback's module also holds
        # sharding declarations the structure check would name instead.
        check_custom_calls(qualname, custom_calls_in(text))
        return parse_module(text, kernel_symbol_prefix(qualname, text))
    return lower


def _eval_shape(jax, fn: Callable, parsed, is_tensor: list[bool], args, kwargs) -> tuple[list, list]:
    """The call's tensors and the types of fn's outputs (jax.eval_shape):
    what a fake implementation needs."""
    tensors, statics = _split(_complete(parsed, args, kwargs), is_tensor)
    structs = [jax.ShapeDtypeStruct(tuple(t.shape), jax_dtype(t.dtype)) for t in tensors]
    with _x64(jax), _Rejected(parsed.name, _tensor_names(parsed, is_tensor),
                              [(t.dtype, t.shape) for t in tensors]):
        return tensors, _outputs(jax.eval_shape(_bind(fn, is_tensor, statics), *structs))


def _outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def jax_op(name: str, fn: Callable, *, schema: Optional[str] = None,
           vjp: Optional[Callable] = None, donate_argnums: Sequence[int] = ()) -> JaxOp:
    """Registers `fn`, a JAX function, as the operator `name` ("ns::op").

    schema: "(Tensor x, float eps=1e-6) -> Tensor" (without the name); by
        default from fn's annotations: int/float/bool parameters are static
        values passed to fn as Python numbers, the rest are tensors; a
        `tuple[...]` return annotation gives several outputs.
    vjp: a JAX function (*args, *cotangents) -> one gradient per tensor
        argument (None for non-float ones), replacing jax.vjp; by default
        jax.vjp of fn, which honours fn's jax.custom_vjp rule.
    donate_argnums: (0,) donates the first argument, as JAX's donation does:
        its buffer goes to the kernel, which writes its (only) result there.
        In PyTorch terms the op updates its first argument in place (its
        schema marks it `Tensor(a!)` and it returns that tensor), so a large
        state (a cache, an optimizer buffer) is updated with no second copy.
        Only the first argument can be donated, the result must have its
        dtype and shape, and no gradient flows through a donating op.
    """
    jax = _import_jax()
    donate = tuple(donate_argnums)
    if donate not in ((), (0,)):
        raise NotImplementedError(
            f"jax_op {name}: only the first argument can be donated (donate_argnums=(0,)), "
            f"not {donate}")
    schema = schema or _schema_from_function(fn)
    if donate:
        return _donating_op(jax, name, fn, schema)
    # Defined first with its backward attached after (the backward op's
    # schema depends on the forward's).
    parsed = torch._C.parse_schema(name + schema)
    is_tensor = _arg_kinds(parsed)

    def fake(*args, **kwargs):
        tensors, out = _eval_shape(jax, fn, parsed, is_tensor, args, kwargs)
        device = tensors[0].device if tensors else torch.device("cpu")
        made = [torch.empty(tuple(o.shape), dtype=torch_dtype(o.dtype), device=device)
                for o in out]
        return tuple(made) if len(parsed.returns) != 1 else made[0]

    cpu = _cpu_runner(jax, fn, parsed, is_tensor)
    forward = define_kernel_op(name, schema,
                               _lowerer(jax, name, fn, is_tensor, _tensor_names(parsed, is_tensor)),
                               fake, cpu)
    backward = _define_backward(jax, name, fn, parsed, is_tensor, vjp)
    return JaxOp(forward, backward)


def _donating_op(jax, name: str, fn: Callable, schema: str) -> "JaxOp":
    """ns::op(Tensor(a!) x, ...) -> Tensor(a!): the kernel's result written
    into x, whose buffer the program takes over when nothing else holds it."""
    plain = torch._C.parse_schema(name + schema)
    args = plain.arguments
    if not args or not isinstance(args[0].type, torch.TensorType) or len(plain.returns) != 1:
        raise ValueError(f"jax_op {name}: a donating op takes a tensor first and returns one "
                         f"tensor, not {schema}")
    first = args[0].name
    normalized = str(plain)[len(name):]  # "(Tensor x, float eps=1e-06) -> Tensor"
    params = normalized[1:normalized.rindex(") ->")]
    text = "(Tensor(a!) " + params[len("Tensor "):] + ") -> Tensor(a!)"
    parsed = torch._C.parse_schema(name + text)
    is_tensor = _arg_kinds(parsed)
    names = _tensor_names(parsed, is_tensor)

    def check_result(out_dtype, out_shape, dtype, shape) -> None:
        if out_dtype != dtype or list(out_shape) != list(shape):
            raise RuntimeError(
                f"{name}: donates '{first}' ({str(dtype).replace('torch.', '')}{list(shape)}) but "
                f"the JAX function returns {str(out_dtype).replace('torch.', '')}{list(out_shape)}; "
                "a donated argument must receive a result of its own dtype and shape")

    lower_plain = _lowerer(jax, name, fn, is_tensor, names)

    def lower(args_desc: list):
        module = lower_plain(args_desc)
        from ._types import parse_mlir_type
        dtype, shape = args_desc[0]
        check_result(*parse_mlir_type(module.results[0]), dtype, shape)
        return module

    def fake(*a, **kw):
        tensors, out = _eval_shape(jax, fn, parsed, is_tensor, a, kw)
        check_result(torch_dtype(out[0].dtype), out[0].shape, tensors[0].dtype, tensors[0].shape)
        return tensors[0]

    run_cpu = _cpu_runner(jax, fn, parsed, is_tensor)

    def cpu(*a, **kw):
        full = _complete(parsed, a, kw)
        result = run_cpu(*full)
        check_result(result.dtype, result.shape, full[0].dtype, full[0].shape)
        return full[0].copy_(result)

    forward = define_kernel_op(name, text, lower, fake, cpu)
    # torch.compile cannot functionalize a custom op returning an alias; in
    # a compiled graph the call is the functional twin plus a copy into the
    # argument, which the compiled program turns into an input update.
    functional = jax_op(name + "_functional", fn, schema=schema)
    return JaxOp(forward, None, donating=True, functional=functional)


def _cpu_runner(jax, fn: Callable, parsed, is_tensor: list[bool]) -> Callable:
    """The op's CPU implementation: the JAX function on JAX's CPU backend."""
    def cpu(*args, **kwargs):
        tensors, statics = _split(_complete(parsed, args, kwargs), is_tensor)
        with _x64(jax), _Rejected(parsed.name, _tensor_names(parsed, is_tensor),
                                  [(t.dtype, t.shape) for t in tensors]):
            arrays = [jax.numpy.asarray(t.detach().contiguous().numpy()) if t.dtype != torch.bfloat16
                      else jax.numpy.asarray(t.detach().float().numpy()).astype(jax.numpy.bfloat16)
                      for t in tensors]
            out = jax.jit(_bind(fn, is_tensor, statics))(*arrays)
        made = [_to_torch(o) for o in _outputs(out)]
        return tuple(made) if len(parsed.returns) != 1 else made[0]
    return cpu


def _to_torch(array) -> torch.Tensor:
    import numpy as np
    if str(array.dtype) == "bfloat16":
        return torch.from_numpy(np.asarray(array.astype("float32"))).to(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _define_backward(jax, name: str, fn: Callable, parsed, is_tensor: list[bool],
                     vjp: Optional[Callable]) -> Optional[KernelOp]:
    """`ns::op_vjp(*tensor args, *cotangents, *statics) -> grads` (one per
    float tensor argument), and the autograd formula that calls it."""
    n_in = sum(is_tensor)
    n_out = len(parsed.returns)
    if n_in == 0:
        return None
    tensor_names = [a.name for a, t in zip(parsed.arguments, is_tensor) if t]
    static_args = [a for a, t in zip(parsed.arguments, is_tensor) if not t]
    bwd_schema = "(" + ", ".join(
        [f"Tensor {n}" for n in tensor_names] + [f"Tensor ct{i}" for i in range(n_out)] +
        [f"{a.type} {a.name}" for a in static_args]) + ") -> (" + \
        ", ".join(["Tensor"] * n_in) + ")"
    bwd_is_tensor = [True] * (n_in + n_out) + [False] * len(static_args)

    def bwd_fn(*args):
        primals, cts, statics = args[:n_in], args[n_in:n_in + n_out], args[n_in + n_out:]
        full = []
        it_t, it_s = iter(primals), iter(statics)
        for t in is_tensor:
            full.append(next(it_t) if t else next(it_s))
        if vjp is not None:
            grads = _outputs(vjp(*full, *cts))
        else:
            _, pullback = jax.vjp(_bind(fn, is_tensor, list(statics)), *primals)
            grads = list(pullback(tuple(cts) if n_out > 1 else cts[0]))
        # Integer inputs get float0 gradients from jax: zeros of their own
        # type stand in (autograd drops them).
        return tuple(g if g is not None and str(getattr(g, "dtype", "")) != "float0"
                     else jax.numpy.zeros(p.shape, p.dtype) for g, p in zip(grads, primals))

    def fake(*args):
        return tuple(torch.empty_like(t) for t in args[:n_in])

    bwd_parsed = torch._C.parse_schema(name + "_vjp" + bwd_schema)
    bwd = define_kernel_op(name + "_vjp", bwd_schema,
                           _lowerer(jax, name + "_vjp", bwd_fn, bwd_is_tensor,
                                    _tensor_names(bwd_parsed, bwd_is_tensor)),
                           fake, _cpu_runner(jax, bwd_fn, bwd_parsed, bwd_is_tensor))

    def setup_context(ctx, inputs, output):
        tensors, statics = _split(_complete(parsed, inputs, {}), is_tensor)
        ctx.save_for_backward(*tensors)
        ctx.statics = statics
        outs = output if isinstance(output, (tuple, list)) else (output,)
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        cts = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
               for g, (shape, dtype, device) in zip(grads, ctx.out_meta)]
        grads = bwd.op(*saved, *cts, *ctx.statics)
        it = iter(grads if isinstance(grads, (tuple, list)) else (grads,))
        out = []
        for t in is_tensor:
            g = next(it) if t else None
            out.append(g if g is not None and (g.is_floating_point() or g.is_complex()) else None)
        return tuple(out)

    torch.library.register_autograd(name, backward, setup_context=setup_context)
    return bwd
