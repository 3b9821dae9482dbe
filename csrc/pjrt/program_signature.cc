#include "pjrt/program_signature.h"

#include <cctype>

namespace torch_pjrt::pjrt {
namespace {

// Parses "2x3xf32" (the inside of tensor<...>); no encoding attributes.
std::optional<TensorSpec> parse_tensor_body(std::string_view body) {
  TensorSpec spec{ElementType::kF32, {}};
  while (true) {
    size_t x = body.find('x');
    bool dim_follows = x != std::string_view::npos && x > 0 &&
                       (body[0] == '?' || std::isdigit(static_cast<unsigned char>(body[0])));
    if (!dim_follows) break;
    std::string_view dim = body.substr(0, x);
    if (dim == "?") {
      spec.dims.push_back(-1);
    } else {
      int64_t value = 0;
      for (char c : dim) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
        value = value * 10 + (c - '0');
      }
      spec.dims.push_back(value);
    }
    body.remove_prefix(x + 1);
  }
  auto type = from_mlir_name(body);
  if (!type) return std::nullopt;
  spec.type = *type;
  return spec;
}

}  // namespace

bool TensorSpec::matches(ElementType other_type, const std::vector<int64_t>& other_dims) const {
  if (other_type != type || other_dims.size() != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != -1 && dims[i] != other_dims[i]) return false;
  }
  return true;
}

std::string TensorSpec::to_string(ElementType type, const std::vector<int64_t>& dims) {
  std::string out(mlir_name(type));
  out += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ",";
    out += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
  }
  return out + "]";
}

std::string TensorSpec::to_string() const { return to_string(type, dims); }

std::optional<std::vector<TensorSpec>> parse_main_signature(std::string_view mlir) {
  size_t at = mlir.find("@main(");
  if (at == std::string_view::npos) return std::nullopt;
  size_t pos = at + 6;
  // The parameter list ends at the ')' that balances "@main(".
  int depth = 1;
  size_t end = pos;
  for (; end < mlir.size() && depth > 0; ++end) {
    if (mlir[end] == '(') ++depth;
    if (mlir[end] == ')') --depth;
  }
  if (depth != 0) return std::nullopt;
  std::string_view params = mlir.substr(pos, end - 1 - pos);

  std::vector<TensorSpec> specs;
  size_t cursor = 0;
  while (true) {
    size_t colon = params.find(':', cursor);
    size_t percent = params.find('%', cursor);
    if (percent == std::string_view::npos) break;
    if (colon == std::string_view::npos) return std::nullopt;
    std::string_view rest = params.substr(colon + 1);
    size_t start = rest.find_first_not_of(" \n\t");
    if (start == std::string_view::npos || rest.substr(start, 7) != "tensor<") return std::nullopt;
    size_t close = rest.find('>', start);
    if (close == std::string_view::npos) return std::nullopt;
    // complex<f32> nests one '<'.
    if (rest.substr(start + 7, close - start - 7).find('<') != std::string_view::npos) {
      close = rest.find('>', close + 1);
      if (close == std::string_view::npos) return std::nullopt;
    }
    auto spec = parse_tensor_body(rest.substr(start + 7, close - start - 7));
    if (!spec) return std::nullopt;
    specs.push_back(*spec);
    cursor = colon + 1 + close + 1;
    // Skip an attribute dictionary such as {jax.buffer_donor = true}.
    size_t next_percent = params.find('%', cursor);
    size_t brace = params.find('{', cursor);
    if (brace != std::string_view::npos && brace < next_percent) {
      size_t brace_end = params.find('}', brace);
      if (brace_end == std::string_view::npos) return std::nullopt;
      cursor = brace_end + 1;
    }
  }
  return specs;
}

}  // namespace torch_pjrt::pjrt
