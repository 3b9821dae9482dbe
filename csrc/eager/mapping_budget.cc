#include "eager/mapping_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace torch_pjrt::backend {
namespace {

std::atomic<int64_t> override_limit{0};

int64_t kernel_limit() {
  static const int64_t limit = [] {
    int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return int64_t{0};
    char text[32] = {};
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    return n > 0 ? static_cast<int64_t>(std::strtoll(text, nullptr, 10)) : int64_t{0};
  }();
  return limit;
}

}  // namespace

int64_t process_mappings() {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char chunk[1 << 16];
  int64_t lines = 0;
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      close(fd);
      return -1;
    }
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) lines += chunk[i] == '\n';
  }
  close(fd);
  return lines;
}

int64_t mapping_limit() {
  int64_t forced = override_limit.load();
  return forced > 0 ? forced : kernel_limit();
}

void set_mapping_limit(int64_t limit) { override_limit.store(limit > 0 ? limit : 0); }

bool mappings_under_pressure() {
  int64_t limit = mapping_limit();
  if (limit <= 0) return false;
  int64_t held = process_mappings();
  return held >= 0 && held * 4 >= limit * 3;
}

}  // namespace torch_pjrt::backend
