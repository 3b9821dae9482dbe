// Adaptive pooling over 2 or 3 spatial dims: _adaptive_avg_pool{2,3}d,
// adaptive_max_pool{2,3}d and their backward ops (1-d pooling reaches these
// as 2-d). Output cell i of a dim of size `in` pooled to `out` covers
// [floor(i*in/out), ceil((i+1)*in/out)). Windows are boxes, so both poolings
// go one dim at a time: gather each cell's window, padded to the longest
// window with masked positions, and reduce it away. Max pooling carries the
// flat index of the best element along. The CPU's 3-d average sums
// bfloat16 and half windows in their own precision, element by element; so
// does the lowering for those dtypes (scan_order_sums).
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <string>

#include "ops/pooling_windows.h"

namespace torch_pjrt::ops {
namespace {

// The windows of one dim: [out, K] positions (clamped into the input) and
// whether each is inside its window, with K the longest window.
struct Windows {
  Value index;  // s64 [out, K]
  Value valid;  // i1 [out, K]
  Value count;  // s64 [out]: each window's length
  int64_t k = 0;
};

int64_t window_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t window_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

Windows windows(Builder& b, int64_t in, int64_t out) {
  Windows w;
  for (int64_t i = 0; i < out; ++i) {
    w.k = std::max(w.k, window_end(i, in, out) - window_start(i, in, out));
  }
  auto s64 = [&](int64_t v, const std::vector<int64_t>& dims) {
    return b.splat(b.constant_int(v, ElementType::kS64), dims);
  };
  std::vector<int64_t> dims = {out, w.k};
  Value cell = b.iota(TensorType{ElementType::kS64, dims}, 0);
  Value start = b.binary("divide", b.binary("multiply", cell, s64(in, dims)), s64(out, dims));
  Value end = b.binary("divide", b.binary("add", b.binary("multiply", b.binary("add", cell, s64(1, dims)), s64(in, dims)),
                                          s64(out - 1, dims)),
                       s64(out, dims));
  Value pos = b.binary("add", start, b.iota(TensorType{ElementType::kS64, dims}, 1));
  w.valid = b.compare(pos, end, hlo::Compare::kLt);
  w.index = b.binary("minimum", pos, s64(in - 1, dims));
  Value cell1 = b.iota(TensorType{ElementType::kS64, {out}}, 0);
  Value start1 = b.binary("divide", b.binary("multiply", cell1, s64(in, {out})), s64(out, {out}));
  Value end1 = b.binary("divide", b.binary("add", b.binary("multiply", b.binary("add", cell1, s64(1, {out})), s64(in, {out})),
                                           s64(out - 1, {out})),
                        s64(out, {out}));
  w.count = b.binary("subtract", end1, start1);
  return w;
}

// The dims of x other than `dim`, as they sit around the [out, K] pair that
// replaces it.
std::vector<int64_t> around(int64_t rank, int64_t dim) {
  std::vector<int64_t> r;
  for (int64_t d = 0; d < rank; ++d) r.push_back(d < dim ? d : d + 1);
  r.erase(r.begin() + dim);
  return r;
}

// x[..., index[o, k], ...] along `dim`: [..., out, K, ...].
Value gather_windows(Builder& b, Value x, int64_t dim, const Windows& w) {
  auto dims = b.dims(x);
  int64_t rank = static_cast<int64_t>(dims.size()), out = b.dims(w.index)[0];
  std::vector<int64_t> slice = dims, result(dims.begin(), dims.begin() + dim);
  slice[dim] = 1;
  result.push_back(out);
  result.push_back(w.k);
  result.insert(result.end(), dims.begin() + dim + 1, dims.end());
  Builder::GatherDims g{around(rank, dim), {dim}, {dim}, 2};
  return b.gather(x, b.reshape(w.index, {out, w.k, 1}), g, slice, result);
}

// The transpose of gather_windows: u ([..., out, K, ...]) added at its
// positions of a dim of size `in`.
Value scatter_windows(Builder& b, Value u, int64_t dim, const Windows& w, int64_t in) {
  auto dims = b.dims(u);
  int64_t out = dims[dim];
  std::vector<int64_t> target(dims.begin(), dims.begin() + dim);
  target.push_back(in);
  target.insert(target.end(), dims.begin() + dim + 2, dims.end());
  Builder::ScatterDims s{around(static_cast<int64_t>(target.size()), dim), {dim}, {dim}, 2};
  return b.scatter(b.zeros(TensorType{b.element_type(u), target}), b.reshape(w.index, {out, w.k, 1}), u, s,
                   [](Builder& r, const std::vector<Value>& a) {
                     return std::vector<Value>{r.binary("add", a[0], a[1])};
                   });
}

// [out, K] broadcast over a [..., out, K, ...] tensor at `dim`.
Value along(Builder& b, Value v, const std::vector<int64_t>& dims, int64_t dim) {
  return b.broadcast_in_dim(v, dims, {dim, dim + 1});
}

std::vector<int64_t> output_size(const std::string& op, int nd, const std::vector<int64_t>& size) {
  TORCH_CHECK(static_cast<int>(size.size()) == nd, op, ": output_size must be ", nd, " ints");
  for (int64_t s : size) TORCH_CHECK(s >= 0, op, ": elements of output_size must be greater than or equal to 0");
  return size;
}

std::vector<int64_t> with_spatial(const std::vector<int64_t>& dims, int nd, const std::vector<int64_t>& size) {
  std::vector<int64_t> r(dims.begin(), dims.end() - nd);
  r.insert(r.end(), size.begin(), size.end());
  return r;
}

// The product of the window lengths at each output cell, [out...] in `type`.
Value window_volume(Builder& b, const std::vector<Windows>& ws, const std::vector<int64_t>& out, ElementType type) {
  Value vol;
  for (size_t i = 0; i < ws.size(); ++i) {
    Value c = b.broadcast_in_dim(b.convert(ws[i].count, type), out, {static_cast<int64_t>(i)});
    vol = vol.valid() ? b.binary("multiply", vol, c) : c;
  }
  return vol;
}

// Window sums as CPU's 3-d kernel computes them for reduced-precision
// inputs: element by element in scan order, rounding the running sum to
// `round_to` after each addition. x: f32 [N, C, D, H, W]; returns f32
// [N, C, out...]. The windows are gathered whole, [K, cells] (K: the
// longest window's volume, masked positions 0), and summed row by row.
Value scan_order_sums(Builder& b, Value x, const std::vector<Windows>& ws, ElementType round_to) {
  Value box = x;
  for (int i = 2; i >= 0; --i) box = gather_windows(b, box, 2 + i, ws[i]);
  auto bd = b.dims(box);  // [N, C, Od, Kd, Oh, Kh, Ow, Kw]
  Value valid;
  for (int i = 0; i < 3; ++i) {
    Value v = b.broadcast_in_dim(ws[i].valid, bd, {2 + 2 * i, 3 + 2 * i});
    valid = valid.valid() ? b.binary("and", valid, v) : v;
  }
  box = b.select(valid, box, b.zeros(TensorType{ElementType::kF32, bd}));
  int64_t k = bd[3] * bd[5] * bd[7], cells = bd[0] * bd[1] * bd[2] * bd[4] * bd[6];
  Value rows = b.reshape(b.transpose(box, {3, 5, 7, 0, 1, 2, 4, 6}), {k, cells});
  auto add = [round_to](Builder& r, Value acc, Value row) {
    return r.convert(r.convert(r.binary("add", acc, row), round_to), ElementType::kF32);
  };
  auto row = [cells](Builder& r, Value table, Value i) {
    return r.reshape(r.dynamic_slice(table, {i, r.constant_int(0, ElementType::kS64)}, {1, cells}), {cells});
  };
  Value sum;
  if (k <= 16) {
    sum = b.reshape(b.slice(rows, {0, 0}, {1, cells}, {1, 1}), {cells});
    for (int64_t i = 1; i < k; ++i) sum = add(b, sum, row(b, rows, b.constant_int(i, ElementType::kS64)));
  } else {
    auto out = b.while_loop(
        {b.constant_int(1, ElementType::kS64), b.reshape(b.slice(rows, {0, 0}, {1, cells}, {1, 1}), {cells}), rows},
        [k](Builder& c, const std::vector<Value>& v) {
          return std::vector<Value>{c.compare(v[0], c.constant_int(k, ElementType::kS64), hlo::Compare::kLt)};
        },
        [&](Builder& c, const std::vector<Value>& v) {
          return std::vector<Value>{c.binary("add", v[0], c.constant_int(1, ElementType::kS64)),
                                    add(c, v[1], row(c, v[2], v[0])), v[2]};
        });
    sum = out[1];
  }
  return b.reshape(sum, {bd[0], bd[1], bd[2], bd[4], bd[6]});
}

void register_adaptive(int nd) {
  std::string n = std::to_string(nd);
  std::string avg = "aten::_adaptive_avg_pool" + n + "d";
  // _adaptive_avg_pool{n}d(self, output_size)
  register_lowering(avg, [nd, avg](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    auto dims0 = b.dims(x0);
    pooling::check_input(avg, nd, dims0);
    auto size = output_size(avg, nd, ctx.int_list(1));
    auto od = with_spatial(dims0, nd, size);
    if (pooling::empty(od)) return std::vector<Value>{b.zeros(TensorType{et(ctx.dtype(0)), od})};
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value x = b.convert(pooling::add_batch(b, x0, nd), acc);
    std::vector<Windows> ws;
    for (int i = 0; i < nd; ++i) ws.push_back(windows(b, b.dims(x)[2 + i], size[i]));
    c10::ScalarType type = ctx.dtype(0);
    if (nd == 3 && (type == c10::ScalarType::BFloat16 || type == c10::ScalarType::Half)) {
      x = scan_order_sums(b, x, ws, et(type));
    } else {
      for (int i = nd - 1; i >= 0; --i) {
        Value gathered = gather_windows(b, x, 2 + i, ws[i]);
        auto gd = b.dims(gathered);
        gathered = b.select(along(b, ws[i].valid, gd, 2 + i), gathered, b.zeros(TensorType{acc, gd}));
        x = reduce(b, gathered, {3 + i}, ReduceKind::kSum);
      }
    }
    Value vol = window_volume(b, ws, size, acc);
    std::vector<int64_t> spatial;
    for (int i = 0; i < nd; ++i) spatial.push_back(2 + i);
    x = b.binary("divide", x, b.broadcast_in_dim(vol, b.dims(x), spatial));
    return std::vector<Value>{pooling::drop_batch(b, b.convert(x, et(ctx.dtype(0))), dims0.size(), nd)};
  }, {avg + ".out"});

  // _adaptive_avg_pool{n}d_backward(grad_output, self)
  register_lowering(avg + "_backward", [nd](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    auto dims0 = b.dims(self);
    ElementType acc = et(opmath_type(ctx.dtype(1)));
    Value g = b.convert(pooling::add_batch(b, ctx.tensor(0), nd), acc);
    auto in_dims = b.dims(pooling::add_batch(b, self, nd));
    if (pooling::empty(in_dims) || pooling::empty(b.dims(g))) {
      return std::vector<Value>{b.zeros(TensorType{et(ctx.dtype(1)), dims0})};
    }
    std::vector<int64_t> size(b.dims(g).begin() + 2, b.dims(g).end()), spatial;
    std::vector<Windows> ws;
    for (int i = 0; i < nd; ++i) {
      ws.push_back(windows(b, in_dims[2 + i], size[i]));
      spatial.push_back(2 + i);
    }
    g = b.binary("divide", g, b.broadcast_in_dim(window_volume(b, ws, size, acc), b.dims(g), spatial));
    for (int i = 0; i < nd; ++i) {
      auto gd = b.dims(g);
      std::vector<int64_t> wide(gd.begin(), gd.begin() + 3 + i);
      wide.push_back(ws[i].k);
      wide.insert(wide.end(), gd.begin() + 3 + i, gd.end());
      std::vector<int64_t> keep;
      for (int64_t d = 0; d < static_cast<int64_t>(gd.size()); ++d) keep.push_back(d <= 2 + i ? d : d + 1);
      Value spread = b.broadcast_in_dim(g, wide, keep);
      spread = b.select(along(b, ws[i].valid, wide, 2 + i), spread, b.zeros(TensorType{acc, wide}));
      g = scatter_windows(b, spread, 2 + i, ws[i], in_dims[2 + i]);
    }
    return std::vector<Value>{pooling::drop_batch(b, b.convert(g, et(ctx.dtype(1))), dims0.size(), nd)};
  }, {avg + "_backward.out"});

  std::string max = "aten::adaptive_max_pool" + n + "d";
  // adaptive_max_pool{n}d(self, output_size) -> (values, indices)
  register_lowering(max, [nd, max](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    auto dims0 = b.dims(x0);
    pooling::check_input(max, nd, dims0);
    auto size = output_size(max, nd, ctx.int_list(1));
    auto od = with_spatial(dims0, nd, size);
    ElementType t = b.element_type(x0);
    if (pooling::empty(od)) {
      return std::vector<Value>{b.zeros(TensorType{t, od}), b.zeros(TensorType{ElementType::kS64, od})};
    }
    Value x = pooling::add_batch(b, x0, nd);
    auto in_dims = b.dims(x);
    bool is_float = hlo::is_float(t);
    Value lowest = reduce_init(b, t, ReduceKind::kMax);
    Value never = b.constant_int(std::numeric_limits<int64_t>::max(), ElementType::kS64);
    Value idx;
    int64_t stride = 1;
    for (int i = nd - 1; i >= 0; --i) {
      int64_t dim = 2 + i;
      Windows w = windows(b, in_dims[dim], size[i]);
      Value v = gather_windows(b, x, dim, w);
      auto gd = b.dims(v);
      Value valid = along(b, w.valid, gd, dim);
      // The flat index of each gathered element: its position here times
      // this dim's stride, plus what the later dims carried.
      Value pos = along(b, b.binary("multiply", w.index, b.splat(b.constant_int(stride, ElementType::kS64), b.dims(w.index))),
                        gd, dim);
      Value flat = idx.valid() ? b.binary("add", pos, gather_windows(b, idx, dim, w)) : pos;
      v = b.select(valid, v, b.splat(lowest, gd));
      flat = b.select(valid, flat, b.splat(never, gd));
      auto best = b.reduce({v, flat}, {lowest, never}, {dim + 1},
                           [is_float](Builder& r, const std::vector<Value>& a) {
                             return pooling::max_with_index(r, a, is_float);
                           });
      x = best[0];
      idx = best[1];
      stride *= in_dims[dim];
    }
    return std::vector<Value>{pooling::drop_batch(b, x, dims0.size(), nd), pooling::drop_batch(b, idx, dims0.size(), nd)};
  }, {max + ".out"});

  // adaptive_max_pool{n}d_backward(grad_output, self, indices)
  register_lowering(max + "_backward", [nd](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    size_t rank = b.dims(self).size();
    auto dims = b.dims(pooling::add_batch(b, self, nd));
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value g = b.convert(pooling::add_batch(b, ctx.tensor(0), nd), acc);
    Value idx = pooling::add_batch(b, ctx.tensor(2), nd);
    Value r = pooling::scatter_flat(b, g, idx, dims, nd);
    return std::vector<Value>{pooling::drop_batch(b, b.convert(r, et(ctx.dtype(0))), rank, nd)};
  }, {max + "_backward.grad_input"});
}

LoweringRegistrar registrar([] {
  register_adaptive(2);
  register_adaptive(3);
});

}  // namespace
}  // namespace torch_pjrt::ops
