// The campaign parser's YAML readers: map entries (unknown keys with a suggestion), typed scalars
// in the YAML 1.2 core schema, the guarded root, and paths relative to the campaign file.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>
#include <vector>

#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/campaign_parser.h"
#include "coordinator/campaign/yaml_guard.h"

namespace nw::campaign_internal {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string JoinNames(Names names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// "; did you mean 'topk'?" when one known name is close, else "".
std::string Suggestion(std::string_view word, Names known) {
  std::string_view best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;  // accept up to a third wrong
  for (std::string_view k : known) {
    const size_t d = EditDistance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best.empty() ? "" : "; did you mean '" + std::string(best) + "'?";
}

bool ValidName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength) return false;
  auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  };
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return std::all_of(s.begin(), s.end(), ok) && alnum(s.front());
}

// YAML 1.2 core-schema integer: [-+]?[0-9]+. nullopt if the text is not one; *overflow is set
// when it is one but does not fit int64.
std::optional<int64_t> ParseIntText(std::string_view s, bool* overflow) {
  *overflow = false;
  std::string_view digits = s;
  bool neg = false;
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) {
    neg = digits.front() == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  // Parse with the sign so that INT64_MIN reads.
  std::string text = (neg ? "-" : "") + std::string(digits);
  int64_t v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    *overflow = true;
    return std::nullopt;
  }
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

// YAML 1.2 core-schema float or integer, finite only:
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
std::optional<double> ParseFloatText(std::string_view s) {
  std::string_view body = s;
  bool neg = false;
  if (!body.empty() && (body.front() == '-' || body.front() == '+')) {
    neg = body.front() == '-';
    body.remove_prefix(1);
  }
  size_t i = 0;
  auto digit = [&](size_t k) { return k < body.size() && body[k] >= '0' && body[k] <= '9'; };
  size_t int_digits = 0, frac_digits = 0;
  while (digit(i)) ++i, ++int_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (digit(i)) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '-' || body[i] == '+')) ++i;
    if (!digit(i)) return std::nullopt;
    while (digit(i)) ++i;
  }
  if (i != body.size()) return std::nullopt;
  std::string text = (neg ? "-" : "") + std::string(int_digits == 0 ? "0" : "") + std::string(body);
  double v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<bool> ParseBoolText(std::string_view s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

bool IsQuoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"; }

// A plain scalar, or one with the core tag `type` (!!int, !!float, !!bool).
bool PlainOrTagged(const YAML::Node& n, std::string_view type) {
  return n.IsScalar() &&
         (n.Tag() == "?" || n.Tag() == std::string(kCoreTagPrefix) + std::string(type));
}

// How a node reads in an error message: "a list", "the string \"16\"", "the number 1.5".
std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Scalar:
      break;
  }
  std::string s = n.Scalar();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  if (!IsQuoted(n)) {
    bool overflow = false;
    if (ParseIntText(s, &overflow) || overflow) return "the integer " + s;
    if (ParseFloatText(s)) return "the number " + s;
    if (ParseBoolText(s)) return "the boolean " + s;
  }
  return "the string \"" + s + "\"";
}

std::string ListNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

std::string Plural(int64_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

Result<std::vector<Parser::Entry>> Parser::MapEntries(const YAML::Node& map,
                                                      const std::string& path,
                                                      Names allowed) const {
  if (!map.IsMap()) return Error(map, path, "must be a map, got " + Describe(map));
  std::vector<Entry> out;
  for (const auto& kv : map) {
    // Copies: yaml-cpp's iterator values are proxies, so references into them dangle.
    const YAML::Node k = kv.first;
    if (!k.IsScalar()) return Error(k, path, "keys must be plain names, got " + Describe(k));
    const std::string key = k.Scalar();
    const std::string kpath = path.empty() ? key : path + "." + key;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Error(k, path,
                   "unknown key '" + key + "'" + Suggestion(key, allowed) +
                       " (allowed: " + JoinNames(allowed) + ")");
    }
    for (const Entry& prev : out) {
      if (prev.key == key) {
        return Error(k, kpath, "duplicate key (first at " + At(Loc(prev.key_node, kpath)) + ")");
      }
    }
    out.push_back(Entry{key, k, kv.second, kpath});
  }
  return out;
}

Result<std::string> Parser::ReadString(const YAML::Node& n, const std::string& path) const {
  if (!n.IsScalar()) return Error(n, path, "must be a string, got " + Describe(n));
  if (n.Tag() != "?" && !IsQuoted(n)) {
    return Error(n, path, "unsupported YAML tag '" + n.Tag() + "'");
  }
  return n.Scalar();
}

Result<int64_t> Parser::ReadInt(const YAML::Node& n, const std::string& path, int64_t min,
                                int64_t max) const {
  bool overflow = false;
  std::optional<int64_t> v;
  if (PlainOrTagged(n, "int")) v = ParseIntText(n.Scalar(), &overflow);
  if (!v) {
    if (overflow) return Error(n, path, "integer " + n.Scalar() + " is out of range");
    return Error(n, path, "must be an integer, got " + Describe(n));
  }
  if (*v < min) {
    return Error(n, path, "must be >= " + std::to_string(min) + ", got " + std::to_string(*v));
  }
  if (*v > max) {
    return Error(n, path, "must be <= " + std::to_string(max) + ", got " + std::to_string(*v));
  }
  return *v;
}

Result<double> Parser::ReadDouble(const YAML::Node& n, const std::string& path) const {
  std::optional<double> v;
  if (PlainOrTagged(n, "float") || PlainOrTagged(n, "int")) v = ParseFloatText(n.Scalar());
  if (!v) return Error(n, path, "must be a number, got " + Describe(n));
  return *v == 0 ? 0.0 : *v;  // -0 reads as 0: one value, one job key
}

Result<bool> Parser::ReadBool(const YAML::Node& n, const std::string& path) const {
  std::optional<bool> v;
  if (PlainOrTagged(n, "bool")) v = ParseBoolText(n.Scalar());
  if (!v) return Error(n, path, "must be true or false, got " + Describe(n));
  return *v;
}

Result<YAML::Node> Parser::LoadRoot(std::string_view text) {
  YamlGuardLimits limits;
  limits.max_bytes = options_.max_bytes;
  limits.max_events = options_.max_events;
  limits.max_nodes = options_.max_nodes;
  limits.max_aliases = options_.max_aliases;
  limits.max_depth = options_.max_depth;
  NW_ASSIGN_OR_RETURN(YamlGuardStats stats, GuardYaml(text, source_, limits));

  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(FormatLocated(source_, e.mark.line >= 0 ? e.mark.line + 1 : 0,
                                                 e.mark.column + 1, "malformed YAML: " + e.msg));
  }
  if (stats.documents == 0 || root.IsNull()) {
    return Status::InvalidArgument(FormatLocated(source_, 0, 0, "the campaign file is empty"));
  }
  if (!root.IsMap()) {
    return Error(root, "", "the top level must be a map of campaign fields, got " + Describe(root));
  }
  return root;
}

Result<std::filesystem::path> Parser::ResolvePath(const std::string& written) const {
  std::filesystem::path base = options_.base_dir;
  std::error_code ec;
  if (base.empty()) base = std::filesystem::current_path(ec);
  if (ec) return Status::IoError("cannot read the current directory: " + ec.message());
  std::filesystem::path p(written);
  std::filesystem::path out =
      (p.is_absolute() ? p : std::filesystem::absolute(base, ec) / p).lexically_normal();
  if (ec) return Status::IoError("cannot make " + base.string() + " absolute: " + ec.message());
  return out;
}

}  // namespace nw::campaign_internal
