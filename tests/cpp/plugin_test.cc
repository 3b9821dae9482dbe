#include <gtest/gtest.h>

#include "pjrt/error.h"
#include "pjrt/plugin.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

TEST(Plugin, LoadsAndReportsAttributes) {
  auto plugin = testing::test_plugin();
  EXPECT_EQ(plugin->plugin_version().major, 0);
  EXPECT_GE(plugin->plugin_version().minor, 81);
  auto xla = plugin->attribute("xla_version");
  ASSERT_TRUE(xla.has_value());
  EXPECT_TRUE(std::holds_alternative<int64_t>(xla->value));
  auto current = plugin->attribute("stablehlo_current_version");
  auto minimum = plugin->attribute("stablehlo_minimum_version");
  ASSERT_TRUE(current && minimum);
  EXPECT_EQ(std::get<std::vector<int64_t>>(current->value).size(), 3u);
  EXPECT_NE(plugin->identity().find("xla_version="), std::string::npos);
  EXPECT_NE(plugin->identity().find(";file="), std::string::npos);
}

TEST(Plugin, SamePathLoadsOnce) {
  EXPECT_EQ(testing::test_plugin().get(), testing::test_plugin().get());
}

TEST(Plugin, MissingPathIsNotFound) {
  try {
    Plugin::load("/nonexistent/libpjrt_missing.so");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libpjrt_missing.so"), std::string::npos);
  }
}

TEST(Plugin, LibraryWithoutPjrtApiIsRefused) {
  // Any shared library that is not a plugin: the C library itself.
  try {
    Plugin::load("/proc/self/exe");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.call(), "Plugin::load");
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace torch_pjrt::pjrt
