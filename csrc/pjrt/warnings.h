// Where the runtime sends warnings it cannot turn into exceptions (a corrupt
// cache entry it recovered from, a plugin newer than the header). stderr by
// default; the Python layer routes them to Python's warnings module.
#pragma once

#include <functional>
#include <string>

namespace torch_pjrt::pjrt {

using WarningHandler = std::function<void(const std::string&)>;

// Replaces the handler; an empty handler restores the default (stderr).
void set_warning_handler(WarningHandler handler);
void warn(const std::string& message);

}  // namespace torch_pjrt::pjrt
