// Strict JSON field readers for the wire decoders (protocol/messages.cc, protocol/control.cc).
// Every error names "<MESSAGE>.<path>: <what>", and types are checked strictly: nlohmann would
// silently turn 1.5 into 1 or true into 1, these readers refuse both.
// Internal to nw_protocol. Thread-safety: a Reader borrows its object; values otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>

#include "common/status.h"

namespace nw::protocol_internal {

class Reader {
 public:
  Reader(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  const nlohmann::json* Find(const char* key, Status* st) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      *st = Status::InvalidArgument(Path(key) + ": missing");
      return nullptr;
    }
    return &*it;
  }

  Status String(const char* key, std::string* out, size_t min_len, size_t max_len) const {
    Status st;
    const nlohmann::json* v = Find(key, &st);
    if (v == nullptr) return st;
    if (!v->is_string()) return Status::InvalidArgument(Path(key) + ": must be a string");
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() < min_len || s.size() > max_len) {
      return Status::InvalidArgument(Path(key) + ": length " + std::to_string(s.size()) +
                                     " outside [" + std::to_string(min_len) + ", " +
                                     std::to_string(max_len) + "]");
    }
    *out = s;
    return Status::Ok();
  }

  template <typename Int>
  Status Integer(const char* key, Int* out, int64_t min, int64_t max) const {
    static_assert(std::is_integral_v<Int>);
    Status st;
    const nlohmann::json* v = Find(key, &st);
    if (v == nullptr) return st;
    if (!v->is_number_integer()) return Status::InvalidArgument(Path(key) + ": must be an integer");
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(Path(key) + ": out of range");
    }
    const int64_t x = v->get<int64_t>();
    if (x < min || x > max) {
      return Status::InvalidArgument(Path(key) + ": " + std::to_string(x) + " outside [" +
                                     std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    *out = static_cast<Int>(x);
    return Status::Ok();
  }

  Status Bool(const char* key, bool* out) const {
    Status st;
    const nlohmann::json* v = Find(key, &st);
    if (v == nullptr) return st;
    if (!v->is_boolean()) return Status::InvalidArgument(Path(key) + ": must be a boolean");
    *out = v->get<bool>();
    return Status::Ok();
  }

  Status Object(const char* key, const nlohmann::json** out) const {
    Status st;
    const nlohmann::json* v = Find(key, &st);
    if (v == nullptr) return st;
    if (!v->is_object()) return Status::InvalidArgument(Path(key) + ": must be an object");
    *out = v;
    return Status::Ok();
  }

  Status Array(const char* key, const nlohmann::json** out, size_t max_size) const {
    Status st;
    const nlohmann::json* v = Find(key, &st);
    if (v == nullptr) return st;
    if (!v->is_array()) return Status::InvalidArgument(Path(key) + ": must be an array");
    if (v->size() > max_size) {
      return Status::InvalidArgument(Path(key) + ": " + std::to_string(v->size()) +
                                     " entries, more than " + std::to_string(max_size));
    }
    *out = v;
    return Status::Ok();
  }

  std::string Path(const char* key) const { return where_ + "." + key; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace nw::protocol_internal
