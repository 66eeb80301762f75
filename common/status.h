// Status and Result<T>: the error values that cross every module boundary in needlework.
//
// A Status is either OK or a code plus a human-readable message that names the file, field or
// message at fault. Result<T> holds either a T or a non-OK Status. Both are [[nodiscard]].
// Exceptions thrown by third-party libraries (yaml-cpp, nlohmann::json, cppzmq) are caught at the
// module edge and converted to a Status. Thread-safety: values; no shared state.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace nw {

// Stable numeric codes: they are stored in SQLite and sent on the wire. Never renumber.
#define NW_STATUS_CODES(X)                                \
  X(kOk, 0, "ok", false)                                  \
  X(kInvalidArgument, 1, "invalid_argument", false)       \
  X(kNotFound, 2, "not_found", false)                     \
  X(kCorruption, 3, "corruption", false)                  \
  X(kIoError, 4, "io_error", true)                        \
  X(kFailedPrecondition, 5, "failed_precondition", false) \
  X(kOutOfRange, 6, "out_of_range", false)                \
  X(kResourceExhausted, 7, "resource_exhausted", true)    \
  X(kUnavailable, 8, "unavailable", true)                 \
  X(kDeadlineExceeded, 9, "deadline_exceeded", true)      \
  X(kCancelled, 10, "cancelled", false)                   \
  X(kAlreadyExists, 11, "already_exists", false)          \
  X(kInternal, 12, "internal", false)                     \
  X(kUnsupported, 13, "unsupported", false)

enum class StatusCode : int {
#define NW_X(name, num, str, retry) name = num,
  NW_STATUS_CODES(NW_X)
#undef NW_X
};

/// Returns the stable snake_case name of a code ("invalid_argument").
std::string_view StatusCodeName(StatusCode code);
/// Returns the code for a stable name, or nullopt.
std::optional<StatusCode> StatusCodeFromName(std::string_view name);
/// True when a failure with this code may succeed if retried elsewhere (I/O, OOM, lost worker).
bool IsRetryable(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid_argument: campaign.yaml:3:5: unknown key 'foo'" (or "ok").
  std::string ToString() const;
  /// Prefixes the message with context ("loading model.safetensors: ..."); OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// Either a value or an error Status, never both.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK Status");
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result constructed from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace nw

#define NW_CONCAT_INNER(a, b) a##b
#define NW_CONCAT(a, b) NW_CONCAT_INNER(a, b)

/// Returns the Status from the enclosing function if `expr` is not OK.
#define NW_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::nw::Status nw_status_ = (expr);        \
    if (!nw_status_.ok()) return nw_status_; \
  } while (0)

#define NW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

/// `NW_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define NW_ASSIGN_OR_RETURN(lhs, expr) \
  NW_ASSIGN_OR_RETURN_IMPL(NW_CONCAT(nw_result_, __LINE__), lhs, expr)
