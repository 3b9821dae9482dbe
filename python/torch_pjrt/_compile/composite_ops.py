"""Core-ATen ops that eager mode reaches through torch's composite kernels
(so eager mode has nothing to lower) and that AOTAutograd keeps whole in a
graph. With no graph lowering, each such node split its graph into two
programs around a strict-eager op; here they are decomposed into ops the
graph lowering has (capture.decompositions() leaves out any op that gains
a lowering of its own)."""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def _mean_all(x, *, dtype=None):
    return _aten.mean.dim(x, None, False, dtype=dtype)


def _diagonal_plane(x, offset: int, dim1: int, dim2: int):
    """x with (dim1, dim2) moved last and flattened into one plane dim, and
    where the diagonal lies in it: (flat, permutation, start, end, step)."""
    rank = x.dim()
    dim1, dim2 = dim1 % rank, dim2 % rank
    if dim1 == dim2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    order = [d for d in range(rank) if d not in (dim1, dim2)] + [dim1, dim2]
    plane = x.permute(*order)
    n, m = plane.shape[-2], plane.shape[-1]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    end = start + (length - 1) * (m + 1) + 1 if length else start
    return plane.reshape(*plane.shape[:-2], n * m), order, start, end, m + 1


def _diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal as a strided slice of the flattened (dim1, dim2) plane,
    where torch's decomposition takes as_strided."""
    flat, _, start, end, step = _diagonal_plane(x, offset, dim1, dim2)
    return flat[..., start:end:step]


def _diagonal_scatter(x, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """diagonal's inverse (its backward): a strided slice_scatter into the
    flattened plane."""
    flat, order, start, end, step = _diagonal_plane(x, offset, dim1, dim2)
    out = _aten.slice_scatter.default(flat, src, flat.dim() - 1, start, end, step)
    plane_shape = [x.shape[d] for d in order]
    inverse = [order.index(d) for d in range(x.dim())]
    return out.reshape(plane_shape).permute(*inverse)


def _true_positions(mask, shape):
    """The mask broadcast to `shape` and flattened, and for each position
    how many Trues come before it (the k-th True gets k)."""
    mask = mask.expand(shape).reshape(-1)
    return mask, mask.to(torch.int64).cumsum(0) - 1


def _masked_scatter(x, mask, source):
    """The k-th True of the (broadcast) mask takes source's k-th element:
    a cumulative count of the mask picks each position's element from
    source padded with one zero, which the False positions read. A True
    past source's end reads an index past the padding: the index op's
    deferred check raises it (IndexError), no value is made up."""
    mask, position = _true_positions(mask, x.shape)
    flat = source.reshape(-1)
    n = flat.numel()
    padded = torch.cat([flat, flat.new_zeros(1)])
    index = torch.where(mask, torch.where(position < n, position, n + 1), n)
    return torch.where(mask, padded[index], x.reshape(-1)).reshape(x.shape)


def _masked_scatter_backward(grad, mask, sizes):
    """source's gradient: the k-th True position's gradient goes to element
    k, the rest stay zero (a scatter-add into one spare slot for the False
    positions, dropped after)."""
    n = 1
    for size in sizes:
        n *= size
    mask, position = _true_positions(mask, grad.shape)
    index = torch.where(mask & (position < n), position, n)
    out = grad.new_zeros(n + 1).scatter_add(0, index, grad.reshape(-1))
    return out[:n].reshape(sizes)


def _on_device(device) -> bool:
    return device is not None and torch.device(device).type == \
        torch._C._get_privateuse1_backend_name()


def _random_factory(draw, default_dtype):
    """torch.rand/randn/randint on the device as eager mode runs them: an
    empty tensor and the in-place draw (uniform_, normal_, random_), so a
    seeded draw gives the same numbers compiled and eager. Declines a
    generator argument or another device."""
    def factory(*args, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
        if generator is not None or not _on_device(device):
            return NotImplemented
        *params, size = args
        empty = torch.empty(size, dtype=dtype or default_dtype(), device=device)
        return draw(empty, *params)
    return factory


def _random_like(draw, default_dtype=None):
    def like(x, *params, dtype=None, layout=None, device=None, pin_memory=None,
             memory_format=None, generator=None):
        target = device if device is not None else x.device
        if generator is not None or not _on_device(target):
            return NotImplemented
        empty = torch.empty(x.shape, dtype=dtype or (default_dtype or (lambda: x.dtype))(),
                            device=target)
        return draw(empty, *params)
    return like


def _uniform01(t):
    return _aten.uniform.default(t, 0.0, 1.0)


def _standard_normal(t):
    return _aten.normal_functional.default(t, 0.0, 1.0)


def _integers(t, *bounds):
    # random.to and a shift: the same bits as random_(low, high), which FX
    # cannot print as a node (`random.from` is a Python keyword).
    low, high = bounds if len(bounds) == 2 else (0, bounds[0])
    drawn = _aten.random.to(t, high - low)
    return drawn if low == 0 else drawn + low


def _scalar_first(op):
    """op(Scalar self, Tensor other) as op(Tensor, Tensor): the scalar
    becomes a tensor shaped like `other`, in the dtype torch would compute
    in. torch's decompositions of these end in prims."""
    def run(a, other):
        return op(torch.full_like(other, a, dtype=torch.result_type(a, other)), other)
    return run


def _copysign_scalar(x, other):
    dtype = torch.result_type(x, other)
    if not dtype.is_floating_point:  # copysign of integers is a float
        dtype = torch.get_default_dtype()
    return _aten.copysign.Tensor(x, torch.full_like(x, other, dtype=dtype))


def _round_decimals(x, *, decimals: int = 0):
    """As torch's reference computes it: round(x * 10^d) * 10^-d."""
    if not x.dtype.is_floating_point:
        return NotImplemented
    if decimals == 0:
        return _aten.round.default(x)
    return _aten.mul.Tensor(_aten.round.default(_aten.mul.Tensor(x, 10 ** decimals)),
                            10 ** -decimals)


def _logcumsumexp(x, dim: int):
    # The composite kernel eager mode runs is this call.
    return _aten._logcumsumexp.default(x, dim)


def _unfold(x, dimension: int, size: int, step: int):
    """unfold as a gather of the windows' positions, where torch's
    decomposition takes as_strided: windows along `dimension`, each
    window's elements in a new last dim."""
    if x.dim() == 0:
        return NotImplemented
    d = dimension % x.dim()
    windows = (x.shape[d] - size) // step + 1
    starts = torch.arange(windows, device=x.device) * step
    index = (starts[:, None] + torch.arange(size, device=x.device)[None, :]).reshape(-1)
    picked = x.index_select(d, index)
    picked = picked.reshape(*x.shape[:d], windows, size, *x.shape[d + 1:])
    return picked.movedim(d + 1, -1)


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim: int = 1):
    """nn.Bilinear's op: each input unsqueezed at its expand dims, the
    product summed over sumdim, as one einsum (matrix products, never the
    full broadcast product)."""
    total = i1.dim() + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:total]

    def spec(expanded):
        return "".join(letters[d] for d in range(total) if d not in set(expanded))

    out = "".join(letters[d] for d in range(total) if d not in set(sumdim))
    return torch.einsum(f"{spec(expand1)},{spec(expand2)},{spec(expand3)}->{out}", i1, i2, i3)


# Random draws that eager mode runs through torch's decompositions (which
# end in rand_like / randn_like, themselves an empty tensor and the
# in-place draw): the same decompositions in graphs, so a seeded draw gives
# the same numbers compiled and eager.
_RANDOM_FROM_TORCH = (_aten.exponential.default, _aten.geometric.default,
                      _aten.log_normal.default, _aten.cauchy.default)


def _normal_tensors(mean, std, *, generator=None):
    """normal(mean, std) with a tensor mean or std: std * z + mean, z a
    standard normal draw of the broadcast shape, as torch's reference
    computes it (its own decomposition ends in prims.normal)."""
    tensors = [t for t in (mean, std) if isinstance(t, torch.Tensor)]
    if generator is not None or not _on_device(tensors[0].device):
        return NotImplemented
    if not isinstance(std, torch.Tensor):
        torch._check(std >= 0, lambda: f"normal expects std >= 0.0, but found std {std}")
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    z = _standard_normal(torch.empty(shape, dtype=tensors[0].dtype, device=tensors[0].device))
    return std * z + mean


def decompositions() -> dict:
    """Core-ATen ops that eager mode runs through a composite kernel and
    graphs keep whole, decomposed into lowered aten ops where there is no
    graph lowering for them here: without it, each (a loss's `mean()`,
    `repeat`, `diagonal`) split its graph into two programs around a
    strict-eager op. torch's own decompositions serve where they produce
    aten ops; for those that end in prims (copysign or remainder with a
    Python scalar, round with decimals) the forms here use aten ops.
    Random draws take the decompositions eager mode runs, so a seeded draw
    is the same in both."""
    from torch._decomp import get_decompositions

    table = get_decompositions([
        _aten.repeat.default, _aten.dist.default, _aten.ldexp.Tensor, _aten.addmv.default,
        _aten._addmm_activation.default, _aten.addmm.dtype, _aten.narrow_copy.default,
        _aten.tril_indices.default, _aten.triu_indices.default])
    table.update(get_decompositions(list(_RANDOM_FROM_TORCH)))
    for overload in (_aten.normal.Tensor_Tensor, _aten.normal.Tensor_float,
                     _aten.normal.float_Tensor):
        table[overload] = _normal_tensors
    from ..decompositions.kernel_only_ops import DECOMPOSITIONS as kernel_only

    table.update(kernel_only)
    table[_aten._trilinear.default] = _trilinear
    table[_aten.copysign.Scalar] = _copysign_scalar
    table[_aten.remainder.Scalar_Tensor] = _scalar_first(_aten.remainder.Tensor)
    table[_aten.xlogy.Scalar_Self] = _scalar_first(_aten.xlogy.Tensor)
    table[_aten.round.decimals] = _round_decimals
    table[_aten.logcumsumexp.default] = _logcumsumexp
    table[_aten.unfold.default] = _unfold
    table[_aten.mean.default] = _mean_all
    table[_aten.diagonal.default] = _diagonal
    table[_aten.diagonal_scatter.default] = _diagonal_scatter
    table[_aten.masked_scatter.default] = _masked_scatter
    table[_aten.masked_scatter_backward.default] = _masked_scatter_backward
    default = torch.get_default_dtype
    table[_aten.rand.default] = _random_factory(_uniform01, default)
    table[_aten.randn.default] = _random_factory(_standard_normal, default)
    table[_aten.randint.default] = _random_factory(_integers, lambda: torch.int64)
    table[_aten.randint.low] = _random_factory(_integers, lambda: torch.int64)
    table[_aten.rand_like.default] = _random_like(_uniform01)
    table[_aten.randn_like.default] = _random_like(_standard_normal)
    table[_aten.randint_like.default] = _random_like(_integers)
    table[_aten.randint_like.low_dtype] = _random_like(_integers)
    return table
