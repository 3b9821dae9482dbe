// PJRT errors as C++ exceptions. Every PJRT_Error a call returns becomes
// exactly one Error naming the call that failed, the PJRT code and message;
// the PJRT_Error itself is destroyed before the exception leaves.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "pjrt/c_api.h"

namespace torch_pjrt::pjrt {

// The canonical status codes PJRT uses (absl's), plus kRuntime for failures
// detected by this runtime rather than reported by a plugin.
enum class ErrorCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(std::string call, ErrorCode code, std::string message);

  // The operation that failed, e.g. "PJRT_Client_Compile".
  const std::string& call() const { return call_; }
  ErrorCode code() const { return code_; }
  // The message without the call and code prefix.
  const std::string& message() const { return message_; }

 private:
  std::string call_;
  ErrorCode code_;
  std::string message_;
};

// Reads code and message from `error`, destroys it, and returns them as an
// Error. `error` must not be null.
Error take_error(const PJRT_Api* api, PJRT_Error* error, std::string_view call);

// Throws take_error(...) when `error` is not null.
inline void check(const PJRT_Api* api, PJRT_Error* error, std::string_view call) {
  if (error != nullptr) throw take_error(api, error, call);
}

}  // namespace torch_pjrt::pjrt
