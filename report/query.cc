#include "report/query.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "report/query_writer.h"

namespace nw::report {

std::string FormatQueryTable(const QueryResult& r) {
  std::ostringstream out;
  auto w = QueryWriter::Create(QueryFormat::kTable, out, SIZE_MAX);
  // Writers to a string stream never fail.
  (void)w->Columns(r.columns);
  for (const auto& row : r.rows) (void)w->Row(row);
  w->Finish();
  return out.str();
}

std::string FormatQueryCsv(const QueryResult& r) {
  std::ostringstream out;
  auto w = QueryWriter::Create(QueryFormat::kCsv, out);
  // Writers to a string stream never fail.
  (void)w->Columns(r.columns);
  for (const auto& row : r.rows) (void)w->Row(row);
  w->Finish();
  return out.str();
}

nlohmann::ordered_json FormatQueryJson(const QueryResult& r) {
  const std::vector<std::string> keys = QueryJsonKeys(r.columns);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& row : r.rows) out.push_back(QueryRowJson(keys, row));
  return out;
}

}  // namespace nw::report
