#include <gtest/gtest.h>

#include "pjrt/compile_options.h"
#include "pjrt/hash.h"

namespace torch_pjrt::pjrt {
namespace {

TEST(CompileOptions, WireFormat) {
  // field 3 (length 4): {field 4 = 1, field 5 = 1}; field 4 = 1.
  EXPECT_EQ(CompileOptions{}.serialize(), std::string("\x1a\x04\x20\x01\x28\x01\x20\x01", 8));
  CompileOptions wide;
  wide.num_replicas = 300;  // a two-byte varint
  wide.portable = false;
  EXPECT_EQ(wide.serialize(), std::string("\x1a\x05\x20\xac\x02\x28\x01", 7));
}

TEST(Hash128, StableAndSensitive) {
  EXPECT_EQ(hash128("stablehlo"), hash128("stablehlo"));
  EXPECT_FALSE(hash128("stablehlo") == hash128("stablehlO"));
  EXPECT_FALSE(hash128("") == hash128(std::string(1, '\0')));
  EXPECT_EQ(hash128("abc").hex().size(), 32u);
  // Splitting the input differently gives a different key only through the
  // separators callers add; the same bytes in one call are the same hash.
  EXPECT_EQ(Hasher().add("abcdefghij").finish(), hash128("abcdefghij"));
}

}  // namespace
}  // namespace torch_pjrt::pjrt
