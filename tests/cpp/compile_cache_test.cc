#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "pjrt/compile_cache.h"
#include "pjrt/error.h"
#include "pjrt/hash.h"
#include "pjrt/warnings.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// Collects warnings for the duration of a test.
class WarningCapture {
 public:
  WarningCapture() {
    set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { set_warning_handler(nullptr); }
  std::vector<std::string> messages;
};

void expect_add_works(const std::shared_ptr<Client>& client, const Executable& exe) {
  Buffer a = testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  Buffer b = testing::f32_buffer(client, {1, 1, 1, 1}, {4});
  ExecuteResult r = exe.execute({&a, &b}, client->device(0));
  EXPECT_EQ(testing::f32_values(r.outputs[0]), (std::vector<float>{2, 3, 4, 5}));
}

TEST(CompileCache, SecondCompileHitsMemory) {
  auto client = testing::test_client();
  CompileCache cache(client, "");
  auto first = cache.get_or_compile(testing::kAddProgram);
  auto second = cache.get_or_compile(testing::kAddProgram);
  EXPECT_EQ(first.source, CacheSource::kCompiled);
  EXPECT_EQ(second.source, CacheSource::kMemory);
  EXPECT_EQ(first.executable.get(), second.executable.get());
  EXPECT_EQ(cache.stats().compilations.load(), 1);
  EXPECT_EQ(cache.stats().memory_hits.load(), 1);
  expect_add_works(client, *second.executable);
}

TEST(CompileCache, DifferentOptionsOrProgramsAreDifferentEntries) {
  auto client = testing::test_client();
  CompileCache cache(client, "");
  CompileOptions not_portable;
  not_portable.portable = false;
  cache.get_or_compile(testing::kAddProgram);
  EXPECT_EQ(cache.get_or_compile(testing::kAddProgram, not_portable).source,
            CacheSource::kCompiled);
  EXPECT_EQ(cache.get_or_compile(testing::kDotProgram).source, CacheSource::kCompiled);
  EXPECT_EQ(cache.memory_entries(), 3u);
}

TEST(CompileCache, DiskEntryIsPrivateAndReusedAfterMemoryIsCleared) {
  testing::TempDir tmp;
  std::string dir = tmp.path() + "/nested/cache";
  auto client = testing::test_client();
  CompileCache cache(client, dir);
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto compiled = cache.get_or_compile(testing::kAddProgram);
  EXPECT_TRUE(fs::exists(cache.entry_path(compiled.key)));
  cache.clear_memory();
  auto loaded = cache.get_or_compile(testing::kAddProgram);
  EXPECT_EQ(loaded.source, CacheSource::kDisk);
  expect_add_works(client, *loaded.executable);
  // No temporary files are left behind.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(CompileCache, NewProcessHitsDisk) {
  testing::TempDir tmp;
  {
    CompileCache cache(testing::test_client(), tmp.path());
    ASSERT_EQ(cache.get_or_compile(testing::kAddProgram).source, CacheSource::kCompiled);
  }
  std::string command = "TORCH_PJRT_TEST_CACHE_CHILD='" + tmp.path() +
                        "' /proc/" + std::to_string(getpid()) +
                        "/exe --gtest_filter=CompileCacheChild.HitsDisk > /dev/null 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << "the child process did not load from disk";
}

// Runs only as the child of NewProcessHitsDisk.
TEST(CompileCacheChild, HitsDisk) {
  const char* dir = std::getenv("TORCH_PJRT_TEST_CACHE_CHILD");
  if (dir == nullptr) GTEST_SKIP() << "run by CompileCache.NewProcessHitsDisk";
  auto client = testing::test_client();
  CompileCache cache(client, dir);
  auto lookup = cache.get_or_compile(testing::kAddProgram);
  ASSERT_EQ(lookup.source, CacheSource::kDisk);
  EXPECT_EQ(cache.stats().compilations.load(), 0);
  expect_add_works(client, *lookup.executable);
}

class DamagedEntry : public ::testing::Test {
 protected:
  // Writes a good entry, lets the test damage it, then asks again with a
  // fresh cache on the same folder.
  CompileCache::Lookup reload_after(const std::function<void(const std::string&)>& damage) {
    client = testing::test_client();
    std::string path;
    {
      CompileCache cache(client, tmp.path());
      path = cache.entry_path(cache.get_or_compile(testing::kAddProgram).key);
    }
    damage(path);
    fresh = std::make_unique<CompileCache>(client, tmp.path());
    return fresh->get_or_compile(testing::kAddProgram);
  }
  void expect_recompiled(const CompileCache::Lookup& lookup, const std::string& reason) {
    EXPECT_EQ(lookup.source, CacheSource::kCompiled);
    EXPECT_EQ(fresh->stats().disk_rejects.load(), 1);
    ASSERT_EQ(warnings.messages.size(), 1u);
    EXPECT_NE(warnings.messages[0].find(reason), std::string::npos) << warnings.messages[0];
    expect_add_works(client, *lookup.executable);
    // The bad entry was replaced: a third cache loads it from disk.
    CompileCache third(client, tmp.path());
    EXPECT_EQ(third.get_or_compile(testing::kAddProgram).source, CacheSource::kDisk);
  }
  testing::TempDir tmp;
  WarningCapture warnings;
  std::shared_ptr<Client> client;
  std::unique_ptr<CompileCache> fresh;
};

TEST_F(DamagedEntry, CorruptedBytesRecompile) {
  auto lookup = reload_after([](const std::string& path) {
    std::string data = read_file(path);
    data[data.size() / 2] ^= 0x5a;
    write_file(path, data);
  });
  expect_recompiled(lookup, "checksum");
}

TEST_F(DamagedEntry, TruncatedEntryRecompiles) {
  auto lookup = reload_after([](const std::string& path) {
    std::string data = read_file(path);
    write_file(path, data.substr(0, data.size() / 3));
  });
  expect_recompiled(lookup, "truncated");
}

TEST_F(DamagedEntry, GarbageEntryRecompiles) {
  auto lookup = reload_after([](const std::string& path) { write_file(path, "hello"); });
  expect_recompiled(lookup, "not a torch-pjrt cache entry");
}

TEST_F(DamagedEntry, AnotherPluginsEntryRecompiles) {
  // A well-formed entry whose plugin identity differs from ours, as if the
  // folder were shared with a different plugin build.
  auto lookup = reload_after([](const std::string& path) {
    std::string data = read_file(path);
    const std::string magic = "TORCH_PJRT_EXECUTABLE\n";
    size_t at = magic.size() + 8;
    uint64_t length;
    std::memcpy(&length, data.data() + at, 8);
    std::string identity = data.substr(at + 8, length);
    identity[0] = identity[0] == 'x' ? 'y' : 'x';
    data.replace(at + 8, length, identity);
    uint64_t checksum = hash128(std::string_view(data).substr(0, data.size() - 8)).low;
    std::memcpy(data.data() + data.size() - 8, &checksum, 8);
    write_file(path, data);
  });
  expect_recompiled(lookup, "another plugin");
}

TEST(CompileCache, UnusableDirectoryIsClearError) {
  testing::TempDir tmp;
  std::string file = tmp.path() + "/not_a_dir";
  write_file(file, "x");
  auto client = testing::test_client();
  for (const std::string& dir : {file, file + "/below"}) {
    try {
      CompileCache cache(client, dir);
      FAIL() << "expected an Error for " << dir;
    } catch (const Error& e) {
      EXPECT_EQ(e.call(), "CompileCache");
      EXPECT_NE(std::string(e.what()).find("TORCH_PJRT_CACHE_DIR"), std::string::npos);
    }
  }
}

TEST(CompileCache, UnreadableDirectoryIsClearError) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any folder; covered by UnusableDirectory";
  testing::TempDir tmp;
  std::string dir = tmp.path() + "/locked";
  ASSERT_EQ(mkdir(dir.c_str(), 0000), 0);
  EXPECT_THROW(CompileCache(testing::test_client(), dir), Error);
  chmod(dir.c_str(), 0700);
}

}  // namespace
}  // namespace torch_pjrt::pjrt
