// The pooling helpers of pooling_windows.h.
#include "ops/pooling_windows.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

namespace torch_pjrt::ops::pooling {
namespace {

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t span = d * (k - 1) + 1;
  int64_t numerator = in + 2 * p - span;
  // Floor division, as torch's: a window longer than the input gives 0.
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  int64_t out = floor_div(ceil_mode ? numerator + s - 1 : numerator, s) + 1;
  // The last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

std::vector<int64_t> expand(const std::string& op, const char* what, int nd,
                            const std::vector<int64_t>& v, const std::vector<int64_t>& fallback) {
  if (v.empty()) return fallback;
  if (v.size() == 1) return std::vector<int64_t>(nd, v[0]);
  TORCH_CHECK(static_cast<int>(v.size()) == nd, op, ": ", what, " must either be a single int, or a tuple of ",
              nd, " ints");
  return v;
}

}  // namespace

bool empty(const std::vector<int64_t>& dims) {
  return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; });
}

void check_input(const std::string& op, int nd, const std::vector<int64_t>& dims) {
  int64_t rank = static_cast<int64_t>(dims.size());
  TORCH_CHECK(rank == nd + 1 || rank == nd + 2, op, ": Expected ", nd + 1, "D or ", nd + 2,
              "D (batch mode) tensor for input, but got a ", rank, "D one");
  for (int64_t i = rank == nd + 2 ? 1 : 0; i < rank; ++i) {
    TORCH_CHECK(dims[i] > 0, op, ": Expected input to have non-zero size for non-batch dimensions, "
                "but dimension ", i, " is empty");
  }
}

Geometry geometry(const std::string& op, int nd, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                  bool ceil_mode) {
  check_input(op, nd, dims);
  Geometry g;
  g.nd = nd;
  g.k = expand(op, "kernel_size", nd, kernel, std::vector<int64_t>(nd, 1));
  g.s = expand(op, "stride", nd, stride, g.k);
  g.p = expand(op, "padding", nd, padding, std::vector<int64_t>(nd, 0));
  g.d = expand(op, "dilation", nd, dilation, std::vector<int64_t>(nd, 1));
  for (int i = 0; i < nd; ++i) {
    TORCH_CHECK(g.k[i] > 0, op, ": kernel size should be greater than zero, but got ", g.k[i]);
    TORCH_CHECK(g.s[i] > 0, op, ": stride should be greater than zero, but got ", g.s[i]);
    TORCH_CHECK(g.d[i] > 0, op, ": dilation should be greater than zero, but got ", g.d[i]);
    TORCH_CHECK(g.p[i] >= 0 && g.p[i] <= g.k[i] / 2,
                "pad should be at most half of effective kernel size, but got pad=", g.p[i],
                ", kernel_size=", g.k[i]);
    int64_t in = dims[dims.size() - nd + i];
    int64_t out = pool_out(in, g.k[i], g.s[i], g.p[i], g.d[i], ceil_mode);
    TORCH_CHECK(out > 0, op, ": Given input size ", in, " in spatial dim ", i,
                ", the calculated output size ", out, " is too small");
    int64_t needed = (out - 1) * g.s[i] + g.d[i] * (g.k[i] - 1) + 1;
    g.in.push_back(in);
    g.out.push_back(out);
    g.extra.push_back(std::max<int64_t>(0, needed - in - 2 * g.p[i]));
  }
  return g;
}

Value add_batch(Builder& b, Value x, int nd) {
  auto dims = b.dims(x);
  if (static_cast<int>(dims.size()) == nd + 2) return x;
  dims.insert(dims.begin(), 1);
  return b.reshape(x, dims);
}

Value drop_batch(Builder& b, Value x, size_t rank, int nd) {
  if (static_cast<int>(rank) == nd + 2) return x;
  auto dims = b.dims(x);
  return b.reshape(x, std::vector<int64_t>(dims.begin() + 1, dims.end()));
}

Builder::WindowAttrs window(const Geometry& g) {
  Builder::WindowAttrs w;
  w.dimensions = {1, 1};
  w.strides = {1, 1};
  w.dilations = {1, 1};
  w.padding = {{0, 0}, {0, 0}};
  for (int i = 0; i < g.nd; ++i) {
    w.dimensions.push_back(g.k[i]);
    w.strides.push_back(g.s[i]);
    w.dilations.push_back(g.d[i]);
    w.padding.push_back({g.p[i], g.p[i] + g.extra[i]});
  }
  return w;
}

Value sum_windows(Builder& b, Value x, const Builder::WindowAttrs& w) {
  return b.reduce_window({x}, {b.constant(0, b.element_type(x))}, w,
                         [](Builder& r, const std::vector<Value>& a) {
                           return std::vector<Value>{r.binary("add", a[0], a[1])};
                         })[0];
}

std::vector<Value> max_with_index(Builder& r, const std::vector<Value>& a, bool is_float) {
  Value take_larger = r.compare(a[2], a[0], hlo::Compare::kGt);
  Value same = r.compare(a[2], a[0], hlo::Compare::kEq);
  Value earlier = r.compare(a[3], a[1], hlo::Compare::kLt);
  Value take = r.binary("or", take_larger, r.binary("and", same, earlier));
  if (is_float) {
    Value cand_nan = r.compare(a[2], a[2], hlo::Compare::kNe);
    Value best_nan = r.compare(a[0], a[0], hlo::Compare::kNe);
    Value later = r.compare(a[3], a[1], hlo::Compare::kGt);
    // A NaN beats a number; of two NaNs the later one wins.
    take = r.binary("or", r.binary("and", take, r.unary("not", best_nan)),
                    r.binary("and", cand_nan, r.binary("or", r.unary("not", best_nan), later)));
  }
  return {r.select(take, a[2], a[0]), r.select(take, a[3], a[1])};
}

Value flat_index(Builder& b, const std::vector<int64_t>& dims, int nd) {
  TensorType type{ElementType::kS64, dims};
  Value flat;
  int64_t stride = 1;
  for (int i = nd - 1; i >= 0; --i) {
    int64_t dim = static_cast<int64_t>(dims.size()) - nd + i;
    Value term = b.binary("multiply", b.iota(type, dim), b.splat(b.constant_int(stride, ElementType::kS64), dims));
    flat = flat.valid() ? b.binary("add", flat, term) : term;
    stride *= dims[dim];
  }
  return flat;
}

Value scatter_flat(Builder& b, Value g, Value indices, const std::vector<int64_t>& input_dims, int nd) {
  auto gd = b.dims(g);
  int64_t plane = 1, cells = 1;
  for (int i = 0; i < nd; ++i) {
    plane *= input_dims[2 + i];
    cells *= gd[2 + i];
  }
  ElementType t = b.element_type(g);
  if (empty(gd) || empty(input_dims)) return b.zeros(TensorType{t, input_dims});
  std::vector<int64_t> cell_dims = {gd[0], gd[1], cells};
  TensorType coord{ElementType::kS64, cell_dims};
  auto col = [&](Value v) { return b.reshape(v, {gd[0], gd[1], cells, 1}); };
  Value coords = b.concatenate({col(b.iota(coord, 0)), col(b.iota(coord, 1)), col(b.reshape(indices, cell_dims))}, 3);
  Builder::ScatterDims s{{}, {0, 1, 2}, {0, 1, 2}, 3};
  Value out = b.scatter(b.zeros(TensorType{t, {input_dims[0], input_dims[1], plane}}), coords,
                        b.reshape(g, cell_dims), s, [](Builder& r, const std::vector<Value>& a) {
                          return std::vector<Value>{r.binary("add", a[0], a[1])};
                        });
  return b.reshape(out, input_dims);
}

}  // namespace torch_pjrt::ops::pooling
