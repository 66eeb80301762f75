// Row mapping for db/'s queries, internal to nw_db: reads a statement's columns into a struct's
// typed fields in order (Columns), and steps a statement to its end, mapping every row
// (ReadRows), so that no reader hand-writes a Step() loop or counts column indexes.
//
//   return ReadRows(q, [](const Query& q) {
//     HeatmapCell c;
//     Columns(q).Into(c.config, c.context_length, c.needle_position, c.trials);
//     return c;  // or a Result<HeatmapCell> when a column can be corrupt
//   });
//
// Thread-safety: as the Query read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "db/sqlite.h"

namespace nw::db_internal {

/// Reads consecutive columns of the current row, from `first`, each into the type of its field:
/// std::string (text), int64_t / int (integer), double (real), bool (integer != 0),
/// std::optional<int64_t> / std::optional<double> / std::optional<std::string> (NULL -> nullopt).
class Columns {
 public:
  explicit Columns(const Query& q, int first = 0) : q_(q), col_(first) {}

  template <typename... T>
  Columns& Into(T&... fields) {
    (Get(fields), ...);
    return *this;
  }
  /// Leaves `n` columns unread.
  Columns& Skip(int n) {
    col_ += n;
    return *this;
  }
  /// The index of the next column to read.
  int next() const { return col_; }

 private:
  void Get(std::string& v) { v = q_.Text(col_++); }
  void Get(int64_t& v) { v = q_.Int(col_++); }
  void Get(int& v) { v = static_cast<int>(q_.Int(col_++)); }
  void Get(double& v) { v = q_.Real(col_++); }
  void Get(bool& v) { v = q_.Int(col_++) != 0; }
  void Get(std::optional<int64_t>& v) { v = q_.OptInt(col_++); }
  void Get(std::optional<double>& v) { v = q_.OptReal(col_++); }
  void Get(std::optional<std::string>& v) {
    v = q_.IsNull(col_) ? std::nullopt : std::optional<std::string>(q_.Text(col_));
    ++col_;
  }

  const Query& q_;
  int col_;
};

namespace rows_detail {
template <typename T>
struct Unwrap {
  using type = T;
  static Result<T> Get(T&& v) { return std::move(v); }
};
template <typename T>
struct Unwrap<Result<T>> {
  using type = T;
  static Result<T> Get(Result<T>&& v) { return std::move(v); }
};
}  // namespace rows_detail

/// Steps `q` to its end and maps each row with `map(const Query&)`, which returns the row's
/// value or a Result of it (the first error stops the read and is returned).
template <typename F, typename R = std::remove_cvref_t<std::invoke_result_t<F&, const Query&>>,
          typename T = typename rows_detail::Unwrap<R>::type>
Result<std::vector<T>> ReadRows(Query& q, F&& map) {
  std::vector<T> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    NW_ASSIGN_OR_RETURN(T value, rows_detail::Unwrap<R>::Get(map(static_cast<const Query&>(q))));
    out.push_back(std::move(value));
  }
  return out;
}

/// Steps `q` once: the first row mapped with `map`, or nullopt when there is none.
template <typename F, typename R = std::remove_cvref_t<std::invoke_result_t<F&, const Query&>>,
          typename T = typename rows_detail::Unwrap<R>::type>
Result<std::optional<T>> ReadOptionalRow(Query& q, F&& map) {
  NW_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<T>();
  NW_ASSIGN_OR_RETURN(T value, rows_detail::Unwrap<R>::Get(map(static_cast<const Query&>(q))));
  return std::optional<T>(std::move(value));
}

}  // namespace nw::db_internal
