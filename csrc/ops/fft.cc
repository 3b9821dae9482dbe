// torch.fft on the device: the three primitives every torch.fft function
// reaches (_fft_r2c, _fft_c2r, _fft_c2c), lowered to stablehlo.fft.
//
// stablehlo.fft transforms the trailing 1 to 3 dims; torch names any dims
// in any order. The lowering moves the named dims to the end (in the named
// order, so the last named dim is the one a real transform halves), runs
// the transform in groups of at most 3 dims (the DFT is separable), and
// moves them back. XLA's inverse transforms divide by n; torch's
// primitives take the scaling as an argument (0: none, 1: 1/sqrt(n),
// 2: 1/n), so the lowering undoes XLA's and applies torch's.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

struct Moved {
  Value x;
  std::vector<int64_t> inverse;  // the permutation that puts the dims back
};

// Permutes `x` so that `dims` (wrapped, distinct) are its trailing dims.
Moved move_to_end(Builder& b, Value x, const std::vector<int64_t>& dims) {
  int64_t rank = static_cast<int64_t>(b.dims(x).size());
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  }
  perm.insert(perm.end(), dims.begin(), dims.end());
  std::vector<int64_t> inverse(rank);
  for (int64_t i = 0; i < rank; ++i) inverse[perm[i]] = i;
  return {b.transpose(x, perm), inverse};
}

std::vector<int64_t> checked_dims(LoweringContext& ctx, const char* op, int64_t rank) {
  std::vector<int64_t> dims = wrap_dims(ctx.int_list(1), rank);
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  TORCH_CHECK(!dims.empty() && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), op,
              ": expected distinct dims to transform, got ", c10::IntArrayRef(ctx.int_list(1)));
  return dims;
}

// The unnormalized complex transform of the trailing `count` (1 to 3) dims.
Value c2c_trailing(Builder& b, Value x, int64_t count, bool forward) {
  std::vector<int64_t> lengths(b.dims(x).end() - count, b.dims(x).end());
  Value out = b.fft(x, forward ? "FFT" : "IFFT", lengths);
  if (forward) return out;
  double n = std::accumulate(lengths.begin(), lengths.end(), 1.0, std::multiplies<double>());
  return b.binary("multiply", out, b.splat(b.constant(n, b.element_type(out)), b.dims(out)));
}

// Scales by torch's normalization mode over the signal size n.
Value normalize(Builder& b, Value x, int64_t mode, double n) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "fft: unknown normalization mode ", mode);
  if (mode == 0) return x;
  double scale = mode == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
  return b.binary("multiply", x, b.splat(b.constant(scale, b.element_type(x)), b.dims(x)));
}

double signal_size(const std::vector<int64_t>& shape, const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(shape[d]);
  return n;
}

void check_real(c10::ScalarType type, const char* op) {
  TORCH_CHECK(type == at::kFloat || type == at::kDouble, op,
              ": expected a float32 or float64 input on tpu, got ", type);
}

void check_complex(c10::ScalarType type, const char* op) {
  TORCH_CHECK(type == at::kComplexFloat || type == at::kComplexDouble, op,
              ": expected a complex64 or complex128 input on tpu, got ", type);
}

// The complex transform of the dims `dims` (any order), unnormalized.
Value c2c(Builder& b, Value x, const std::vector<int64_t>& dims, bool forward) {
  // Separable: each dim transforms on its own; grouping by 3 only saves ops.
  Moved moved = move_to_end(b, x, dims);
  Value out = moved.x;
  int64_t rank = static_cast<int64_t>(b.dims(out).size());
  int64_t count = static_cast<int64_t>(dims.size());
  for (int64_t start = 0; start < count; start += 3) {
    int64_t group = std::min<int64_t>(3, count - start);
    // Bring dims [rank-count+start, +group) to the end, transform, put back.
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < rank - count + start || d >= rank - count + start + group) perm.push_back(d);
    }
    for (int64_t d = rank - count + start; d < rank - count + start + group; ++d) perm.push_back(d);
    std::vector<int64_t> back(rank);
    for (int64_t i = 0; i < rank; ++i) back[perm[i]] = i;
    out = b.transpose(c2c_trailing(b, b.transpose(out, perm), group, forward), back);
  }
  return b.transpose(out, moved.inverse);
}

LoweringRegistrar fft_registrar([] {
  // _fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward)
  register_lowering("aten::_fft_c2c", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_complex(ctx.dtype(0), "_fft_c2c");
    Value x = ctx.tensor(0);
    auto shape = b.dims(x);
    auto dims = checked_dims(ctx, "_fft_c2c", static_cast<int64_t>(shape.size()));
    Value out = c2c(b, x, dims, ctx.bool_arg(3));
    return std::vector<Value>{normalize(b, out, ctx.int_arg(2), signal_size(shape, dims))};
  });

  // _fft_r2c(Tensor self, int[] dim, int normalization, bool onesided)
  register_lowering("aten::_fft_r2c", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_real(ctx.dtype(0), "_fft_r2c");
    Value x = ctx.tensor(0);
    auto shape = b.dims(x);
    auto dims = checked_dims(ctx, "_fft_r2c", static_cast<int64_t>(shape.size()));
    double n = signal_size(shape, dims);
    Value out;
    if (!ctx.bool_arg(3)) {  // the full spectrum: the complex transform of x + 0i
      Value z = b.complex(x, b.zeros(b.type(x)));
      out = c2c(b, z, dims, true);
    } else {
      // The halved (last named) dim by RFFT, then the others by FFT.
      int64_t last = dims.back();
      Moved moved = move_to_end(b, x, {last});
      Value half = b.transpose(b.fft(moved.x, "RFFT", {shape[last]}), moved.inverse);
      std::vector<int64_t> rest(dims.begin(), dims.end() - 1);
      out = rest.empty() ? half : c2c(b, half, rest, true);
    }
    return std::vector<Value>{normalize(b, out, ctx.int_arg(2), n)};
  });

  // _fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size)
  register_lowering("aten::_fft_c2r", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_complex(ctx.dtype(0), "_fft_c2r");
    Value x = ctx.tensor(0);
    auto shape = b.dims(x);
    auto dims = checked_dims(ctx, "_fft_c2r", static_cast<int64_t>(shape.size()));
    int64_t last = dims.back(), n_last = ctx.int_arg(3);
    TORCH_CHECK(n_last >= 1, "_fft_c2r: invalid last_dim_size ", n_last);
    TORCH_CHECK(shape[last] == n_last / 2 + 1, "_fft_c2r: expected dim ", last, " of size ",
                n_last / 2 + 1, " for an output of size ", n_last, ", got input of size ",
                c10::IntArrayRef(shape));
    std::vector<int64_t> rest(dims.begin(), dims.end() - 1);
    Value z = rest.empty() ? x : c2c(b, x, rest, false);
    Moved moved = move_to_end(b, z, {last});
    Value real = b.fft(moved.x, "IRFFT", {n_last});
    real = b.binary("multiply", real, b.splat(b.constant(static_cast<double>(n_last), b.element_type(real)),
                                             b.dims(real)));
    real = b.transpose(real, moved.inverse);
    std::vector<int64_t> out_shape = shape;
    out_shape[last] = n_last;
    return std::vector<Value>{normalize(b, real, ctx.int_arg(2), signal_size(out_shape, dims))};
  });
});

}  // namespace
}  // namespace torch_pjrt::ops
