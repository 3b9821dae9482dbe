// A 128-bit content hash for compile-cache keys. Not cryptographic: disk
// entries also store their full key material and are compared on load.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace torch_pjrt::pjrt {

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const Hash128& o) const { return high == o.high && low == o.low; }
  // 32 lowercase hex digits.
  std::string hex() const;
};

class Hasher {
 public:
  Hasher& add(std::string_view bytes);
  Hasher& add(uint64_t value);
  Hash128 finish() const;

 private:
  uint64_t a_ = 0x243f6a8885a308d3ull;  // two lanes with distinct seeds
  uint64_t b_ = 0x13198a2e03707344ull;
  uint64_t length_ = 0;
};

Hash128 hash128(std::string_view bytes);

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.low ^ (h.high * 31)); }
};

}  // namespace torch_pjrt::pjrt
