// PJRT_NamedValue as an owning C++ value: plugin attributes, device
// attributes and client create options all travel in this form.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "pjrt/c_api.h"

namespace torch_pjrt::pjrt {

struct NamedValue {
  using Value = std::variant<std::string, int64_t, std::vector<int64_t>, float, bool>;
  std::string name;
  Value value;

  // Human-readable value: "1.2.3" for lists, "true"/"false" for bools.
  std::string value_string() const;
};

// Copies `count` PJRT values (owned by the plugin) into owning values.
std::vector<NamedValue> copy_named_values(const PJRT_NamedValue* values, size_t count);

// A view of owning values as the PJRT array a call takes. Keeps pointers into
// `values`, which must outlive it and stay unmodified.
class NamedValueArray {
 public:
  explicit NamedValueArray(const std::vector<NamedValue>& values);
  const PJRT_NamedValue* data() const { return entries_.data(); }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<PJRT_NamedValue> entries_;
};

}  // namespace torch_pjrt::pjrt
