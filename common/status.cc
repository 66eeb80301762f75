#include "common/status.h"

namespace nw {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
#define NW_X(name, num, str, retry) \
  case StatusCode::name:            \
    return str;
    NW_STATUS_CODES(NW_X)
#undef NW_X
  }
  return "unknown";
}

std::optional<StatusCode> StatusCodeFromName(std::string_view name) {
#define NW_X(cname, num, str, retry) \
  if (name == str) return StatusCode::cname;
  NW_STATUS_CODES(NW_X)
#undef NW_X
  return std::nullopt;
}

bool IsRetryable(StatusCode code) {
  switch (code) {
#define NW_X(name, num, str, retry) \
  case StatusCode::name:            \
    return retry;
    NW_STATUS_CODES(NW_X)
#undef NW_X
  }
  return false;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace nw
