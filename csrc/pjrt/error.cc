#include "pjrt/error.h"

namespace torch_pjrt::pjrt {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kCancelled: return "CANCELLED";
    case ErrorCode::kUnknown: return "UNKNOWN";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kAlreadyExists: return "ALREADY_EXISTS";
    case ErrorCode::kPermissionDenied: return "PERMISSION_DENIED";
    case ErrorCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case ErrorCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kOutOfRange: return "OUT_OF_RANGE";
    case ErrorCode::kUnimplemented: return "UNIMPLEMENTED";
    case ErrorCode::kInternal: return "INTERNAL";
    case ErrorCode::kUnavailable: return "UNAVAILABLE";
    case ErrorCode::kDataLoss: return "DATA_LOSS";
    case ErrorCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

Error::Error(std::string call, ErrorCode code, std::string message)
    : std::runtime_error(call + " failed (" + error_code_name(code) + "): " + message),
      call_(std::move(call)),
      code_(code),
      message_(std::move(message)) {}

Error take_error(const PJRT_Api* api, PJRT_Error* error, std::string_view call) {
  auto message_args = TORCH_PJRT_ARGS(PJRT_Error_Message_Args);
  message_args.error = error;
  api->PJRT_Error_Message(&message_args);
  std::string message(message_args.message, message_args.message_size);

  auto code_args = TORCH_PJRT_ARGS(PJRT_Error_GetCode_Args);
  code_args.error = error;
  ErrorCode code = ErrorCode::kUnknown;
  // GetCode itself returns an error only on a broken plugin; keep kUnknown then.
  if (PJRT_Error* code_error = api->PJRT_Error_GetCode(&code_args)) {
    auto destroy = TORCH_PJRT_ARGS(PJRT_Error_Destroy_Args);
    destroy.error = code_error;
    api->PJRT_Error_Destroy(&destroy);
  } else {
    code = static_cast<ErrorCode>(code_args.code);
  }

  auto destroy = TORCH_PJRT_ARGS(PJRT_Error_Destroy_Args);
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  return Error(std::string(call), code, std::move(message));
}

}  // namespace torch_pjrt::pjrt
