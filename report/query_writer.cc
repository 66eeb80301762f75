#include "report/query_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "report/escape.h"
#include "report/stats.h"

namespace nw::report {
namespace {

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out += kDigits[u >> 4];
    out += kDigits[u & 15];
  }
  return out;
}

std::string RealText(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  // Prefer the shortest form that reads back the same.
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[40];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

// Display width: UTF-8 continuation bytes take no column.
size_t Width(const std::string& s) {
  size_t w = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++w;
  }
  return w;
}

class CsvWriter final : public QueryWriter {
 public:
  explicit CsvWriter(std::ostream& out) : out_(out) {}
  Status Columns(const std::vector<std::string>& columns) override {
    started_ = true;
    for (size_t c = 0; c < columns.size(); ++c) out_ << (c > 0 ? "," : "") << CsvField(columns[c]);
    out_ << "\n";
    return Status::Ok();
  }
  Status Row(const std::vector<SqlValue>& row) override {
    for (size_t c = 0; c < row.size(); ++c) {
      out_ << (c > 0 ? "," : "") << CsvField(QueryPlainText(row[c]));
    }
    out_ << "\n";
    return Status::Ok();
  }
  void Finish() override { out_.flush(); }

 private:
  std::ostream& out_;
};

class JsonWriter final : public QueryWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}
  Status Columns(const std::vector<std::string>& columns) override {
    started_ = true;
    keys_ = QueryJsonKeys(columns);
    return Status::Ok();
  }
  Status Row(const std::vector<SqlValue>& row) override {
    // As nlohmann's dump(2) of the whole array would print this element.
    std::string text =
        QueryRowJson(keys_, row).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    std::string indented = "  ";
    for (char c : text) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    out_ << (rows_++ == 0 ? "[\n" : ",\n") << indented;
    return Status::Ok();
  }
  void Finish() override {
    out_ << (rows_ == 0 ? "[]\n" : "\n]\n");
    out_.flush();
  }

 private:
  std::ostream& out_;
  std::vector<std::string> keys_;
  int64_t rows_ = 0;
};

class TableWriter final : public QueryWriter {
 public:
  TableWriter(std::ostream& out, size_t window) : out_(out), window_(window) {}
  Status Columns(const std::vector<std::string>& columns) override {
    started_ = true;
    columns_ = columns;
    width_.assign(columns.size(), 0);
    numeric_.assign(columns.size(), true);
    for (size_t c = 0; c < columns.size(); ++c) width_[c] = Width(columns[c]);
    return Status::Ok();
  }
  Status Row(const std::vector<SqlValue>& row) override {
    ++rows_;
    std::vector<std::string> line;
    line.reserve(row.size());
    for (size_t c = 0; c < row.size(); ++c) line.push_back(QueryDisplayText(row[c]));
    if (header_written_) {
      WriteLine(line);
      return Status::Ok();
    }
    for (size_t c = 0; c < row.size() && c < width_.size(); ++c) {
      if (row[c].type == SqlValue::Type::kText || row[c].type == SqlValue::Type::kBlob) {
        numeric_[c] = false;
      }
      width_[c] = std::max(width_[c], Width(line[c]));
    }
    held_.push_back(std::move(line));
    if (held_.size() >= window_) Flush();
    return Status::Ok();
  }
  void Finish() override {
    Flush();
    out_ << "(" << FormatThousands(rows_) << (rows_ == 1 ? " row)\n" : " rows)\n");
    out_.flush();
  }

 private:
  std::string Pad(const std::string& s, size_t c) const {
    const size_t w = c < width_.size() ? width_[c] : 0;
    const std::string fill(w - std::min(w, Width(s)), ' ');
    return c < numeric_.size() && numeric_[c] ? fill + s : s + fill;
  }
  void WriteLine(const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) l += "  ";
      l += Pad(cells[c], c);
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out_ << l << "\n";
  }
  // Writes the header (once) and the rows held so far.
  void Flush() {
    if (!header_written_) {
      WriteLine(columns_);
      std::string rule;
      for (size_t c = 0; c < width_.size(); ++c) {
        if (c > 0) rule += "  ";
        rule += std::string(width_[c], '-');
      }
      out_ << rule << "\n";
      header_written_ = true;
    }
    for (const auto& line : held_) WriteLine(line);
    held_.clear();
  }

  std::ostream& out_;
  size_t window_;
  std::vector<std::string> columns_;
  std::vector<size_t> width_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> held_;
  bool header_written_ = false;
  int64_t rows_ = 0;
};

}  // namespace

Result<QueryFormat> ParseQueryFormat(std::string_view name) {
  if (name == "table") return QueryFormat::kTable;
  if (name == "csv") return QueryFormat::kCsv;
  if (name == "json") return QueryFormat::kJson;
  return Status::InvalidArgument("--format must be table, csv or json, not '" + std::string(name) +
                                 "'");
}

std::unique_ptr<QueryWriter> QueryWriter::Create(QueryFormat format, std::ostream& out,
                                                 size_t table_window) {
  switch (format) {
    case QueryFormat::kCsv:
      return std::make_unique<CsvWriter>(out);
    case QueryFormat::kJson:
      return std::make_unique<JsonWriter>(out);
    case QueryFormat::kTable:
      break;
  }
  return std::make_unique<TableWriter>(out, std::max<size_t>(table_window, 1));
}

std::string QueryPlainText(const SqlValue& v) {
  switch (v.type) {
    case SqlValue::Type::kNull:
      return "";
    case SqlValue::Type::kInteger:
      return std::to_string(v.integer);
    case SqlValue::Type::kReal:
      return RealText(v.real);
    case SqlValue::Type::kText:
      return v.text;
    case SqlValue::Type::kBlob:
      return Hex(v.text);
  }
  return "";
}

std::string QueryDisplayText(const SqlValue& v) {
  if (v.type == SqlValue::Type::kNull) return "NULL";
  if (v.type == SqlValue::Type::kBlob) return "x'" + Hex(v.text) + "'";
  std::string s;
  for (char c : QueryPlainText(v)) {
    if (c == '\n') {
      s += "\\n";
    } else if (c == '\t') {
      s += "\\t";
    } else if (c == '\r') {
      s += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      s += "?";
    } else {
      s += c;
    }
  }
  constexpr size_t kMax = 80;
  if (s.size() > kMax) {
    size_t cut = kMax - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return s;
}

}  // namespace nw::report

namespace nw::report {

std::vector<std::string> QueryJsonKeys(const std::vector<std::string>& columns) {
  std::vector<std::string> keys;
  std::map<std::string, int> seen;
  for (const std::string& c : columns) {
    const int k = ++seen[c];
    keys.push_back(k == 1 ? c : c + ":" + std::to_string(k));
  }
  return keys;
}

nlohmann::ordered_json QueryRowJson(const std::vector<std::string>& keys,
                                    const std::vector<SqlValue>& row) {
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  for (size_t c = 0; c < row.size() && c < keys.size(); ++c) {
    const SqlValue& v = row[c];
    switch (v.type) {
      case SqlValue::Type::kNull:
        obj[keys[c]] = nullptr;
        break;
      case SqlValue::Type::kInteger:
        obj[keys[c]] = v.integer;
        break;
      case SqlValue::Type::kReal:
        obj[keys[c]] = v.real;
        break;
      case SqlValue::Type::kText:
        obj[keys[c]] = v.text;
        break;
      case SqlValue::Type::kBlob:
        obj[keys[c]] = {{"hex", Hex(v.text)}};
        break;
    }
  }
  return obj;
}

}  // namespace nw::report
