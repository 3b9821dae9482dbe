#include "pjrt/hash.h"

#include <cstring>

namespace torch_pjrt::pjrt {
namespace {

// 64-bit finaliser with good avalanche (the murmur3 fmix constants).
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

std::string Hash128::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = digits[(high >> (4 * i)) & 0xf];
    out[31 - i] = digits[(low >> (4 * i)) & 0xf];
  }
  return out;
}

Hasher& Hasher::add(std::string_view bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    a_ = rotl(a_ ^ (word * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
    b_ = rotl(b_ + (word * 0x52dce729ull), 27) * 0x9e3779b97f4a7c15ull + a_;
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  a_ = rotl(a_ ^ ((tail ^ n) * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
  b_ = rotl(b_ + ((tail + n) * 0x52dce729ull), 27) * 0x9e3779b97f4a7c15ull + a_;
  length_ += bytes.size();
  return *this;
}

Hasher& Hasher::add(uint64_t value) {
  char bytes[8];
  std::memcpy(bytes, &value, 8);
  return add(std::string_view(bytes, 8));
}

Hash128 Hasher::finish() const {
  uint64_t a = mix(a_ ^ length_);
  uint64_t b = mix(b_ + a);
  return {mix(a + b), b};
}

Hash128 hash128(std::string_view bytes) { return Hasher().add(bytes).finish(); }

}  // namespace torch_pjrt::pjrt
