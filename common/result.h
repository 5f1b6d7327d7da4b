// Errors as values for the Plan C core.
//
// Result<T> holds either a T or an error: a code callers decide on and a
// message meant for a person (an admin reading slurmctld's log, or a user
// reading what sbatch printed).  The core never throws for expected
// failures; callers check ok(), then code() to decide and error() to say.
// Thread safety: a plain value type, no shared state.
#ifndef PLANC_COMMON_RESULT_H_
#define PLANC_COMMON_RESULT_H_

#include <optional>
#include <string>
#include <utility>

namespace planc {

enum class ErrorCode {
  kInvalid,     // the input is wrong (a config key, a record): fix it
  kNotFound,    // no such file (e.g. a state file on the first start)
  kUnreadable,  // it exists but cannot be read (permissions, I/O error)
  kCorrupt,     // it was read but is damaged (truncated, bad checksum)
  kRetryable,   // a resource is unavailable for now (a database down): try again
  kRefused,     // a peer refused the data for good (a constraint): set it aside
};

// "not found", "unreadable", ...: for logs.
inline const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalid:
      return "invalid";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kUnreadable:
      return "unreadable";
    case ErrorCode::kCorrupt:
      return "corrupt";
    case ErrorCode::kRetryable:
      return "retryable";
    case ErrorCode::kRefused:
      return "refused";
  }
  return "?";
}

template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  static Result failure(std::string message) { return failure(ErrorCode::kInvalid, message); }
  static Result failure(ErrorCode code, std::string message) {
    Result r;
    r.code_ = code;
    r.error_ = std::move(message);
    return r;
  }

  bool ok() const { return value_.has_value(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  // Meaningful when !ok().
  ErrorCode code() const { return code_; }
  const std::string& error() const { return error_; }

 private:
  Result() = default;
  std::optional<T> value_;
  ErrorCode code_ = ErrorCode::kInvalid;
  std::string error_;
};

}  // namespace planc

#endif  // PLANC_COMMON_RESULT_H_
