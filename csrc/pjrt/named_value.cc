#include "pjrt/named_value.h"

#include <sstream>

namespace torch_pjrt::pjrt {

std::string NamedValue::value_string() const {
  struct Printer {
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(const std::vector<int64_t>& v) const {
      std::ostringstream out;
      for (size_t i = 0; i < v.size(); ++i) out << (i ? "." : "") << v[i];
      return out.str();
    }
    std::string operator()(float v) const {
      std::ostringstream out;
      out << v;
      return out.str();
    }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
  };
  return std::visit(Printer{}, value);
}

std::vector<NamedValue> copy_named_values(const PJRT_NamedValue* values, size_t count) {
  std::vector<NamedValue> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const PJRT_NamedValue& v = values[i];
    NamedValue item{std::string(v.name, v.name_size), std::string()};
    switch (v.type) {
      case PJRT_NamedValue_kString:
        item.value = std::string(v.string_value, v.value_size);
        break;
      case PJRT_NamedValue_kInt64:
        item.value = v.int64_value;
        break;
      case PJRT_NamedValue_kInt64List:
        item.value = std::vector<int64_t>(v.int64_array_value, v.int64_array_value + v.value_size);
        break;
      case PJRT_NamedValue_kFloat:
        item.value = v.float_value;
        break;
      case PJRT_NamedValue_kBool:
        item.value = v.bool_value;
        break;
      default:
        continue;  // A kind newer than our header: skip rather than misread it.
    }
    out.push_back(std::move(item));
  }
  return out;
}

NamedValueArray::NamedValueArray(const std::vector<NamedValue>& values) {
  entries_.reserve(values.size());
  for (const NamedValue& v : values) {
    auto entry = TORCH_PJRT_ARGS(PJRT_NamedValue);
    entry.name = v.name.data();
    entry.name_size = v.name.size();
    if (auto* s = std::get_if<std::string>(&v.value)) {
      entry.type = PJRT_NamedValue_kString;
      entry.string_value = s->data();
      entry.value_size = s->size();
    } else if (auto* i = std::get_if<int64_t>(&v.value)) {
      entry.type = PJRT_NamedValue_kInt64;
      entry.int64_value = *i;
      entry.value_size = 1;
    } else if (auto* list = std::get_if<std::vector<int64_t>>(&v.value)) {
      entry.type = PJRT_NamedValue_kInt64List;
      entry.int64_array_value = list->data();
      entry.value_size = list->size();
    } else if (auto* f = std::get_if<float>(&v.value)) {
      entry.type = PJRT_NamedValue_kFloat;
      entry.float_value = *f;
      entry.value_size = 1;
    } else {
      entry.type = PJRT_NamedValue_kBool;
      entry.bool_value = std::get<bool>(v.value);
      entry.value_size = 1;
    }
    entries_.push_back(entry);
  }
}

}  // namespace torch_pjrt::pjrt
