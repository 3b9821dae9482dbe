// How many memory mappings the process holds against the kernel's limit
// (vm.max_map_count). Every executable the CPU plugin compiles keeps its
// machine code in mappings of its own, about three per kernel; a process
// that compiles thousands of programs and keeps them all reaches the limit,
// after which the plugin's code allocations fail inside a compile and the
// process dies in a later C++ exception's unwinding. Programs are therefore
// released, least recently used first, before that point (program_cache.cc).
#pragma once

#include <cstdint>

namespace torch_pjrt::backend {

// Mappings the process holds now (lines of /proc/self/maps); -1 where that
// cannot be read.
int64_t process_mappings();

// The limit in force: vm.max_map_count, or what set_mapping_limit gave
// (tests); 0 where neither is known.
int64_t mapping_limit();

// Overrides the limit (0 restores the kernel's). For tests of the release.
void set_mapping_limit(int64_t limit);

// True when the process holds three quarters of the limit or more.
bool mappings_under_pressure();

}  // namespace torch_pjrt::backend
