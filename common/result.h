// Errors as values for the Plan C core.
//
// Result<T> holds either a T or an error message meant for a person (an admin
// reading slurmctld's log, or a user reading what sbatch printed).  The core
// never throws for expected failures; callers check ok() and read error().
// Thread safety: a plain value type, no shared state.
#ifndef PLANC_COMMON_RESULT_H_
#define PLANC_COMMON_RESULT_H_

#include <optional>
#include <string>
#include <utility>

namespace planc {

template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  static Result failure(std::string message) {
    Result r;
    r.error_ = std::move(message);
    return r;
  }

  bool ok() const { return value_.has_value(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const std::string& error() const { return error_; }

 private:
  Result() = default;
  std::optional<T> value_;
  std::string error_;
};

}  // namespace planc

#endif  // PLANC_COMMON_RESULT_H_
