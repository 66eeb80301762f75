// ParseCampaignText / ParseCampaignFile: YAML -> Campaign, and the cell plan (matrix product,
// exclude, include).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <map>
#include <span>
#include <sstream>
#include <system_error>

#include "common/file_io.h"
#include "common/sha256.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/job_check.h"
#include "coordinator/campaign/yaml_guard.h"
#include "engine/backend_catalog.h"
#include "engine/text/niah.h"

namespace nw {

std::string_view AxisName(Axis axis) {
  switch (axis) {
    case Axis::kTask:
      return "task";
    case Axis::kHaystack:
      return "haystack";
    case Axis::kBackend:
      return "backend";
    case Axis::kPrecision:
      return "precision";
    case Axis::kFault:
      return "fault";
    case Axis::kTopk:
      return "topk";
    case Axis::kContextLength:
      return "context_length";
    case Axis::kNeedlePosition:
      return "needle_position";
  }
  return "unknown";
}

std::optional<Axis> AxisFromName(std::string_view name) {
  for (Axis a : kAllAxes) {
    if (AxisName(a) == name) return a;
  }
  return std::nullopt;
}

namespace {

// Shortest text that reads back as the same double ("0.5", "1", "-30").
std::string FormatDouble(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string AxisValue::ToString() const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  return FormatDouble(std::get<double>(value));
}

std::vector<std::string> KnownBackends() { return BackendNames(); }

int64_t DeriveTrialSeed(int64_t campaign_seed, int trial) {
  const std::string hex =
      Sha256Hex("nw-trial-seed/v1:" + std::to_string(campaign_seed) + ":" + std::to_string(trial));
  uint64_t v = 0;
  for (int i = 0; i < 13; ++i) {  // 52 bits: exact in a double, so safe in any JSON reader
    const char c = hex[static_cast<size_t>(i)];
    v = (v << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return static_cast<int64_t>(v);
}

namespace {

// kMaxTopk, kMaxContextLength, kMaxNewTokens, kMaxTrials, kMaxHttp*: job_check.h (the daemon
// checks submitted jobs against the same limits).
constexpr int64_t kMaxRangeValues = 10'000;
constexpr int64_t kMaxMatrixCombinations = 10'000'000;
// Steps of the plan (combinations x exclude entries, include items x cells, ...): well under a
// second of work. Counted as the plan is made, so no file under the size limit takes longer.
constexpr int64_t kMaxPlanSteps = 50'000'000;
constexpr size_t kMaxNameLength = 64;

constexpr std::string_view kCoreTagPrefix = "tag:yaml.org,2002:";

using Names = std::span<const std::string_view>;

constexpr std::string_view kTopKeys[] = {
    "name",       "description", "model",      "task",   "haystack", "matrix",
    "include",    "exclude",     "precisions", "trials", "seeds",    "seed",
    "generation", "probe",       "max_jobs",   "search", "criterion"};
constexpr std::string_view kAxisKeys[] = {"task",  "haystack", "backend",        "precision",
                                          "fault", "topk",     "context_length", "needle_position"};
constexpr std::string_view kIncludeKeys[] = {
    "task", "haystack",       "backend",         "precision",      "fault",
    "topk", "context_length", "needle_position", "max_new_tokens", "probe"};
constexpr std::string_view kProfileKeys[] = {"base",    "weights", "activations",
                                             "index_q", "index_k", "kv"};
constexpr std::string_view kRangeKinds[] = {"linear", "geometric"};
constexpr std::string_view kLinearKeys[] = {"from", "to", "step", "count"};
constexpr std::string_view kGeometricKeys[] = {"from", "to", "factor", "count"};
constexpr std::string_view kGenerationKeys[] = {"max_new_tokens"};
constexpr std::string_view kSearchKeys[] = {"boundary"};
constexpr std::string_view kCriterionKeys[] = {"pass_rate", "confidence"};
constexpr std::string_view kBoundaryKeys[] = {"first_trials", "confidence", "budget"};
constexpr std::string_view kHttpTopKeys[] = {"http"};
constexpr std::string_view kHttpKeys[] = {"url",          "model",
                                          "api",          "tokenizer",
                                          "headers",      "api_key_env",
                                          "api_key_file", "engine_params",
                                          "concurrency",  "timeout_ms",
                                          "retries",      "ready_timeout_ms",
                                          "health_path",  "server_index_topk",
                                          "stream",       "sampling",
                                          "ca_file"};
constexpr std::string_view kSamplingKeys[] = {"temperature", "top_p",      "top_k",
                                              "seed",        "min_tokens", "max_tokens"};
// Request headers that carry credentials: they belong in api_key_env / api_key_file.
constexpr std::string_view kSecretHeaders[] = {"authorization", "proxy-authorization", "x-api-key",
                                               "api-key", "cookie"};

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

// "http(s)://host[:port][/v1]": the only URLs the http backend takes (http/client.h HttpUrl
// parses them on the worker). "" when fine, else why not.
std::string HttpUrlProblem(std::string_view url) {
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
  } else {
    return "must start with http:// or https://";
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (path != "" && path != "/" && path != "/v1" && path != "/v1/") {
    return "the path must be empty or /v1 (requests go to /v1/completions, /v1/chat/completions)";
  }
  if (authority.find('@') != std::string_view::npos) {
    return "credentials do not belong in the URL; use api_key_env or api_key_file";
  }
  std::string_view host = authority;
  if (!host.empty() && host.front() == '[') {  // [::1]:8000
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return "unterminated [ in the host";
    const std::string_view after = host.substr(close + 1);
    if (!after.empty() && after.front() != ':') return "expected :port after ]";
    host = after;  // only the port part is checked below
    if (host.empty()) return "";
  }
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = host.substr(colon + 1);
    int v = 0;
    auto r = std::from_chars(port.data(), port.data() + port.size(), v);
    if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || v < 1 ||
        v > 65535) {
      return "bad port '" + std::string(port) + "'";
    }
    host = host.substr(0, colon);
    if (host.empty() && authority.front() != '[') return "missing host";
  } else if (host.empty()) {
    return "missing host";
  }
  return "";
}

bool IsHttpMap(const YAML::Node& n) {
  if (!n.IsMap()) return false;
  for (const auto& kv : n) {
    const YAML::Node k = kv.first;
    if (k.IsScalar() && k.Scalar() == "http") return true;
  }
  return false;
}

bool IsHeaderName(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool IsIntegralAxis(Axis a) { return a == Axis::kTopk || a == Axis::kContextLength; }
bool IsNameAxis(Axis a) {
  return a == Axis::kTask || a == Axis::kHaystack || a == Axis::kBackend || a == Axis::kPrecision ||
         a == Axis::kFault;
}
size_t Ix(Axis a) { return static_cast<size_t>(a); }

std::string Plural(int64_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

class Parser {
 public:
  Parser(std::string source, const ParseOptions& options)
      : source_(std::move(source)), options_(options) {}

  Result<Campaign> Run(std::string_view text);
  Result<Criterion> RunCriterionOnly(std::string_view text);

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
    std::string path;
  };

  SourceLocation Loc(const YAML::Node& n, std::string path) const {
    const YAML::Mark m = n.Mark();
    SourceLocation loc;
    if (m.line >= 0) {
      loc.line = m.line + 1;
      loc.column = m.column + 1;
    }
    loc.path = std::move(path);
    return loc;
  }
  Status Error(const SourceLocation& where, std::string_view msg) const {
    std::string text = where.path.empty() ? std::string(msg) : where.path + ": " + std::string(msg);
    return Status::InvalidArgument(FormatLocated(source_, where.line, where.column, text));
  }
  Status Error(const YAML::Node& n, const std::string& path, std::string_view msg) const {
    return Error(Loc(n, path), msg);
  }
  static std::string At(const SourceLocation& w) {
    if (w.line == 0) return w.path;
    return w.path + " at line " + std::to_string(w.line) + ", column " + std::to_string(w.column);
  }

  Result<std::vector<Entry>> MapEntries(const YAML::Node& map, const std::string& path,
                                        Names allowed) const;
  Result<std::string> ReadString(const YAML::Node& n, const std::string& path) const;
  Result<int64_t> ReadInt(const YAML::Node& n, const std::string& path, int64_t min,
                          int64_t max) const;
  Result<double> ReadDouble(const YAML::Node& n, const std::string& path) const;
  Status ParseHttpSampling(const Entry& e, HttpSampling* out);
  Result<bool> ReadBool(const YAML::Node& n, const std::string& path) const;

  Status ParsePrecisions(const Entry& e);
  Status ParseAxis(Axis axis, const YAML::Node& n, const std::string& path, AxisValues* out);
  Status ParseAxisItem(Axis axis, const YAML::Node& n, const std::string& path, AxisValues* out);
  Status ParseHttpBackend(const YAML::Node& n, const std::string& path, AxisValues* out);
  Status CheckHttpReferences() const;
  Result<std::filesystem::path> ResolvePath(const std::string& written) const;
  Result<AxisValue> ParseAxisScalar(Axis axis, const YAML::Node& n, const std::string& path) const;
  Status ParseRange(Axis axis, const YAML::Node& n, const std::string& path, AxisValues* out) const;
  Status CheckNumber(Axis axis, const AxisValue& v) const;
  Status ParseMatrixEntries(const Entry& e, bool include, std::vector<MatrixEntry>* out);
  Status ParseTrials(const Entry* trials, const Entry* seeds, const Entry* seed);
  Status ParseCriterion(const Entry& e);
  Result<YAML::Node> LoadRoot(std::string_view text);
  Status ParseSearch(const Entry& e);
  Status Plan(const YAML::Node& matrix_node);
  Status CheckCells() const;

  std::string source_;
  const ParseOptions& options_;
  Campaign c_;
  std::map<std::string, PrecisionProfile> custom_;
};

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

Status Parser::ParsePrecisions(const Entry& e) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> profiles, MapEntries(e.value, e.path, Names()));
  if (profiles.empty()) return Error(e.value, e.path, "must define at least one profile");
  const std::vector<std::string> builtins = NamedPrecisionProfileNames();
  for (const Entry& pe : profiles) {
    if (!ValidName(pe.key)) {
      return Error(pe.key_node, pe.path,
                   "a profile name is lowercase letters, digits, '.', '_' and '-' (at most 64, "
                   "starting with a letter or digit)");
    }
    if (std::find(builtins.begin(), builtins.end(), pe.key) != builtins.end()) {
      return Error(pe.key_node, pe.path,
                   "'" + pe.key +
                       "' is a built-in profile; give the campaign's profile another "
                       "name");
    }
    NW_ASSIGN_OR_RETURN(std::vector<Entry> parts, MapEntries(pe.value, pe.path, kProfileKeys));
    PrecisionProfile p;
    bool has_base = false;
    std::vector<std::string_view> given;
    for (const Entry& part : parts) {
      if (part.key != "base") continue;
      NW_ASSIGN_OR_RETURN(std::string base, ReadString(part.value, part.path));
      auto b = NamedPrecisionProfile(base);
      if (!b.ok()) {
        return Error(part.value, part.path,
                     "unknown base profile '" + base + "' (built-in: " + ListNames(builtins) + ")");
      }
      p = *b;
      has_base = true;
    }
    for (const Entry& part : parts) {
      if (part.key == "base") continue;
      NW_ASSIGN_OR_RETURN(std::string fmt, ReadString(part.value, part.path));
      auto f = ParseNumFormat(fmt);
      if (!f.ok()) return Error(part.value, part.path, f.status().message());
      NumFormat* slot = part.key == "weights"       ? &p.weights
                        : part.key == "activations" ? &p.activations
                        : part.key == "index_q"     ? &p.index_q
                        : part.key == "index_k"     ? &p.index_k
                                                    : &p.kv;
      *slot = *f;
      given.push_back(part.key);
    }
    if (!has_base) {
      std::vector<std::string_view> missing;
      for (std::string_view k : kProfileKeys) {
        if (k != "base" && std::find(given.begin(), given.end(), k) == given.end()) {
          missing.push_back(k);
        }
      }
      if (!missing.empty()) {
        return Error(pe.value, pe.path,
                     "missing " + JoinNames(missing) +
                         ": give all five parts (weights, activations, index_q, index_k, kv) or "
                         "a base profile");
      }
    }
    p.name = pe.key;
    Status valid = p.Validate();
    if (!valid.ok()) return Error(pe.value, pe.path, valid.message());
    for (const std::string& b : builtins) {
      PrecisionProfile builtin = *NamedPrecisionProfile(b);
      builtin.name = p.name;
      if (builtin == p) {
        c_.warnings.push_back(FormatLocated(source_, Loc(pe.key_node, "").line,
                                            Loc(pe.key_node, "").column,
                                            pe.path + ": same parts as the built-in profile '" + b +
                                                "'; its jobs get other keys than '" + b +
                                                "' jobs because the name is part of "
                                                "the key"));
      }
    }
    custom_[pe.key] = p;
    c_.custom_precisions.push_back(pe.key);
  }
  return Status::Ok();
}

Status Parser::ParseAxis(Axis axis, const YAML::Node& n, const std::string& path, AxisValues* out) {
  AxisValues values;
  if (n.IsSequence()) {
    if (n.size() == 0) return Error(n, path, "must not be empty");
    for (size_t i = 0; i < n.size(); ++i) {
      NW_RETURN_IF_ERROR(ParseAxisItem(axis, n[i], path + "[" + std::to_string(i) + "]", &values));
    }
  } else {
    NW_RETURN_IF_ERROR(ParseAxisItem(axis, n, path, &values));
  }
  std::map<std::variant<std::string, int64_t, double>, size_t> seen;
  for (size_t i = 0; i < values.size(); ++i) {
    auto [it, inserted] = seen.emplace(values[i].value, i);
    if (!inserted) {
      return Error(values[i].where, "duplicate value " + values[i].ToString() + " (also " +
                                        At(values[it->second].where) + ")");
    }
  }
  *out = std::move(values);
  return Status::Ok();
}

Status Parser::ParseAxisItem(Axis axis, const YAML::Node& n, const std::string& path,
                             AxisValues* out) {
  if (axis == Axis::kBackend && options_.allow_http && IsHttpMap(n)) {
    return ParseHttpBackend(n, path, out);
  }
  if (n.IsMap()) return ParseRange(axis, n, path, out);
  if (n.IsSequence()) return Error(n, path, "lists inside lists are not allowed");
  NW_ASSIGN_OR_RETURN(AxisValue v, ParseAxisScalar(axis, n, path));
  out->push_back(std::move(v));
  return Status::Ok();
}

Result<AxisValue> Parser::ParseAxisScalar(Axis axis, const YAML::Node& n,
                                          const std::string& path) const {
  AxisValue v;
  v.where = Loc(n, path);
  switch (axis) {
    case Axis::kTask: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      auto t = ParseNiahTask(s);
      if (!t.ok()) {
        std::vector<std::string> known;
        for (NiahTask k : {NiahTask::kSingle, NiahTask::kMultikey, NiahTask::kRepeat}) {
          known.emplace_back(NiahTaskName(k));
        }
        return Error(n, path, "unknown task '" + s + "' (expected " + ListNames(known) + ")");
      }
      v.value = std::string(NiahTaskName(*t));
      return v;
    }
    case Axis::kHaystack: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      auto h = ParseNiahHaystack(s);
      if (!h.ok()) {
        std::vector<std::string> known;
        for (NiahHaystack k :
             {NiahHaystack::kNoise, NiahHaystack::kEssay, NiahHaystack::kNeedles}) {
          known.emplace_back(NiahHaystackName(k));
        }
        return Error(n, path, "unknown haystack '" + s + "' (expected " + ListNames(known) + ")");
      }
      v.value = std::string(NiahHaystackName(*h));
      return v;
    }
    case Axis::kBackend: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      const auto& known = options_.backends;
      if (s == "http" && options_.allow_http) {  // the campaign's {http: {...}} backend
        v.value = s;
        return v;
      }
      if (std::find(known.begin(), known.end(), s) == known.end()) {
        return Error(n, path, "unknown backend '" + s + "' (expected " + ListNames(known) + ")");
      }
      v.value = s;
      return v;
    }
    case Axis::kPrecision: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      if (!custom_.count(s) && !NamedPrecisionProfile(s).ok()) {
        std::string msg = "unknown precision profile '" + s +
                          "' (built-in: " + ListNames(NamedPrecisionProfileNames());
        if (!c_.custom_precisions.empty()) {
          msg += "; defined under precisions: " + ListNames(c_.custom_precisions);
        }
        return Error(n, path, msg + ")");
      }
      v.value = s;
      return v;
    }
    case Axis::kFault: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      if (!ParseFault(s).ok()) {
        return Error(
            n, path,
            "unknown fault '" + s + "' (expected " + ListNames(FaultNames()) + "; docs/faults.md)");
      }
      v.value = s;
      return v;
    }
    case Axis::kTopk: {
      NW_ASSIGN_OR_RETURN(int64_t k, ReadInt(n, path, 1, kMaxTopk));
      v.value = k;
      return v;
    }
    case Axis::kContextLength: {
      NW_ASSIGN_OR_RETURN(int64_t len, ReadInt(n, path, 1, kMaxContextLength));
      v.value = len;
      return v;
    }
    case Axis::kNeedlePosition: {
      NW_ASSIGN_OR_RETURN(double pos, ReadDouble(n, path));
      v.value = pos;
      NW_RETURN_IF_ERROR(CheckNumber(axis, v));
      return v;
    }
  }
  return Status::Internal("unhandled axis");
}

// Range checks shared by scalars and range-generated values.
Status Parser::CheckNumber(Axis axis, const AxisValue& v) const {
  if (axis == Axis::kNeedlePosition) {
    const double pos = v.number();
    if (pos > 1) {
      return Error(v.where,
                   "must be a fraction in [0, 1] or a negative token offset such as -30, "
                   "got " +
                       v.ToString());
    }
    if (pos < 0 && pos != std::floor(pos)) {
      return Error(v.where,
                   "a negative position counts tokens from the end and must be a whole "
                   "number (such as -30), got " +
                       v.ToString());
    }
    if (pos < -static_cast<double>(kMaxContextLength)) {
      return Error(v.where, "offset " + v.ToString() + " is longer than any context");
    }
    return Status::Ok();
  }
  const int64_t max = axis == Axis::kTopk ? kMaxTopk : kMaxContextLength;
  const int64_t x = v.integer();
  if (x < 1) return Error(v.where, "must be >= 1, got " + std::to_string(x));
  if (x > max) {
    return Error(v.where, "must be <= " + std::to_string(max) + ", got " + std::to_string(x));
  }
  return Status::Ok();
}

Status Parser::ParseRange(Axis axis, const YAML::Node& n, const std::string& path,
                          AxisValues* out) const {
  if (IsNameAxis(axis)) {
    return Error(n, path, "must be a name or a list of names, got " + Describe(n));
  }
  NW_ASSIGN_OR_RETURN(std::vector<Entry> kind, MapEntries(n, path, kRangeKinds));
  if (kind.size() != 1) {
    return Error(n, path, "a range is a map with one key, linear or geometric");
  }
  const Entry& r = kind[0];
  const bool geometric = r.key == "geometric";
  const bool integral = IsIntegralAxis(axis);
  if (geometric && !integral) {
    return Error(r.key_node, r.path,
                 "geometric ranges are for context_length and topk; use linear or a list");
  }
  const Names keys = geometric ? Names(kGeometricKeys) : Names(kLinearKeys);
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(r.value, r.path, keys));
  const Entry* from = nullptr;
  const Entry* to = nullptr;
  const Entry* step = nullptr;  // step, factor or count
  for (const Entry& f : fields) {
    if (f.key == "from") {
      from = &f;
    } else if (f.key == "to") {
      to = &f;
    } else if (step != nullptr) {
      return Error(
          f.key_node, f.path,
          "give one of " + std::string(geometric ? "factor" : "step") + " and count, not both");
    } else {
      step = &f;
    }
  }
  if (from == nullptr || to == nullptr || step == nullptr) {
    return Error(r.value, r.path,
                 std::string("a ") + r.key + " range needs from, to and " +
                     (geometric ? "factor" : "step") + " or count");
  }

  const SourceLocation where = Loc(n, path);
  std::vector<AxisValue> generated;
  auto emit = [&](std::variant<std::string, int64_t, double> value) -> Status {
    if (static_cast<int64_t>(generated.size()) >= kMaxRangeValues) {
      return Error(where,
                   "the range yields more than " + std::to_string(kMaxRangeValues) + " values");
    }
    AxisValue v;
    v.value = std::move(value);
    v.where = where;
    NW_RETURN_IF_ERROR(CheckNumber(axis, v));
    generated.push_back(std::move(v));
    return Status::Ok();
  };
  auto check_distinct = [&](std::string_view hint) -> Status {
    for (size_t i = 1; i < generated.size(); ++i) {
      if (generated[i].value == generated[i - 1].value) {
        return Error(where, "the range yields " + generated[i].ToString() +
                                " twice after rounding to whole numbers; " + std::string(hint));
      }
    }
    return Status::Ok();
  };

  if (integral) {
    NW_ASSIGN_OR_RETURN(int64_t lo, ReadInt(from->value, from->path, 1, INT64_MAX));
    NW_ASSIGN_OR_RETURN(int64_t hi, ReadInt(to->value, to->path, 1, INT64_MAX));
    if (hi < lo) return Error(to->value, to->path, "must be >= from (" + std::to_string(lo) + ")");
    if (step->key == "count") {
      NW_ASSIGN_OR_RETURN(int64_t count, ReadInt(step->value, step->path, 1, kMaxRangeValues));
      if (count == 1 && hi != lo) {
        return Error(step->value, step->path, "must be >= 2 when from and to differ");
      }
      for (int64_t i = 0; i < count; ++i) {
        double x;
        if (i == 0 || count == 1) {
          x = static_cast<double>(lo);
        } else if (i == count - 1) {
          x = static_cast<double>(hi);
        } else if (geometric) {
          x = static_cast<double>(lo) *
              std::pow(static_cast<double>(hi) / static_cast<double>(lo),
                       static_cast<double>(i) / static_cast<double>(count - 1));
        } else {
          x = static_cast<double>(lo) + static_cast<double>(hi - lo) * static_cast<double>(i) /
                                            static_cast<double>(count - 1);
        }
        NW_RETURN_IF_ERROR(emit(static_cast<int64_t>(std::llround(x))));
      }
      NW_RETURN_IF_ERROR(check_distinct("lower count"));
    } else if (geometric) {
      NW_ASSIGN_OR_RETURN(double factor, ReadDouble(step->value, step->path));
      if (!(factor > 1)) {
        return Error(step->value, step->path, "must be > 1, got " + FormatDouble(factor));
      }
      const double limit = static_cast<double>(hi) * (1 + 1e-12);
      for (int64_t i = 0;; ++i) {
        const double x = static_cast<double>(lo) * std::pow(factor, static_cast<double>(i));
        if (x > limit) break;
        NW_RETURN_IF_ERROR(emit(static_cast<int64_t>(std::llround(x))));
      }
      NW_RETURN_IF_ERROR(check_distinct("raise factor"));
    } else {
      NW_ASSIGN_OR_RETURN(int64_t s, ReadInt(step->value, step->path, 1, INT64_MAX));
      if ((hi - lo) / s + 1 > kMaxRangeValues) {
        return Error(where,
                     "the range yields more than " + std::to_string(kMaxRangeValues) + " values");
      }
      for (int64_t x = lo; x <= hi; x += s) {
        NW_RETURN_IF_ERROR(emit(x));
        if (x > hi - s) break;  // no overflow past hi
      }
    }
  } else {
    NW_ASSIGN_OR_RETURN(double lo, ReadDouble(from->value, from->path));
    NW_ASSIGN_OR_RETURN(double hi, ReadDouble(to->value, to->path));
    if (hi < lo) return Error(to->value, to->path, "must be >= from (" + FormatDouble(lo) + ")");
    // Values sit on a 1e-9 grid so 0.1 steps give the same doubles as writing 0.3 by hand.
    auto snap = [](double x) {
      const double s = std::round(x * 1e9) / 1e9;
      return s == 0 ? 0.0 : s;
    };
    if (step->key == "count") {
      NW_ASSIGN_OR_RETURN(int64_t count, ReadInt(step->value, step->path, 1, kMaxRangeValues));
      if (count == 1 && hi != lo) {
        return Error(step->value, step->path, "must be >= 2 when from and to differ");
      }
      for (int64_t i = 0; i < count; ++i) {
        const double x =
            count == 1 ? lo
                       : lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(count - 1);
        NW_RETURN_IF_ERROR(emit(i == count - 1 ? hi : snap(x)));
      }
      for (size_t i = 1; i < generated.size(); ++i) {
        if (generated[i].value == generated[i - 1].value) {
          return Error(where,
                       "the range yields " + generated[i].ToString() + " twice; lower count");
        }
      }
    } else {
      NW_ASSIGN_OR_RETURN(double s, ReadDouble(step->value, step->path));
      if (!(s > 0)) return Error(step->value, step->path, "must be > 0, got " + FormatDouble(s));
      const double steps = std::floor((hi - lo) / s + 1e-9);
      if (steps + 1 > static_cast<double>(kMaxRangeValues)) {
        return Error(where,
                     "the range yields more than " + std::to_string(kMaxRangeValues) + " values");
      }
      const int64_t n_values = static_cast<int64_t>(steps) + 1;
      for (int64_t i = 0; i < n_values; ++i) {
        NW_RETURN_IF_ERROR(emit(snap(lo + s * static_cast<double>(i))));
      }
    }
  }
  for (AxisValue& v : generated) out->push_back(std::move(v));
  return Status::Ok();
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

// http.sampling: {temperature, top_p, top_k, seed, min_tokens}, each checked where written.
Status Parser::ParseHttpSampling(const Entry& e, HttpSampling* out) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(e.value, e.path, kSamplingKeys));
  for (const Entry& f : fields) {
    const std::string& k = f.key;
    if (k == "temperature") {
      NW_ASSIGN_OR_RETURN(double t, ReadDouble(f.value, f.path));
      if (!(t >= 0 && t <= 2)) {
        return Error(f.value, f.path, "must be in 0..2 (0 is greedy), got " + f.value.Scalar());
      }
      out->temperature = t;
    } else if (k == "top_p") {
      NW_ASSIGN_OR_RETURN(double p, ReadDouble(f.value, f.path));
      if (!(p > 0 && p <= 1)) {
        return Error(f.value, f.path, "must be in (0, 1], got " + f.value.Scalar());
      }
      out->top_p = p;
    } else if (k == "top_k") {
      NW_ASSIGN_OR_RETURN(int64_t v, ReadInt(f.value, f.path, 1, kMaxSamplingTopK));
      out->top_k = static_cast<int>(v);
    } else if (k == "seed") {
      NW_ASSIGN_OR_RETURN(out->seed, ReadInt(f.value, f.path, 0, INT64_MAX));
    } else if (k == "min_tokens") {
      NW_ASSIGN_OR_RETURN(int64_t v, ReadInt(f.value, f.path, 0, kMaxNewTokens));
      out->min_tokens = static_cast<int>(v);
    } else if (k == "max_tokens") {
      return Error(f.key_node, f.path,
                   "the number of tokens to generate is generation.max_new_tokens (or "
                   "max_new_tokens in an include entry), sent as max_tokens");
    }
  }
  // Requests are greedy (temperature 0) unless the campaign says otherwise, and at temperature 0
  // these change nothing: asking for them there is a mistake.
  if (!out->temperature || *out->temperature == 0) {
    for (const Entry& f : fields) {
      if (f.key == "top_p" || f.key == "top_k" || f.key == "seed") {
        return Error(f.key_node, f.path,
                     "has no effect at temperature 0 (greedy, the default); set "
                     "sampling.temperature above 0 to sample");
      }
    }
  }
  return Status::Ok();
}

// backend: {http: {url: ..., model: ..., ...}} -> the backend value "http" plus c_.http.
Status Parser::ParseHttpBackend(const YAML::Node& n, const std::string& path, AxisValues* out) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> top, MapEntries(n, path, kHttpTopKeys));
  const Entry& e = top.front();  // IsHttpMap found the key, MapEntries allowed only it
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(e.value, e.path, kHttpKeys));
  HttpBackendSettings hs;
  hs.where = Loc(e.key_node, e.path);
  hs.tokenizer_where = hs.where;
  HttpBackendSpec& h = hs.spec;
  bool has_url = false, has_model = false;
  SourceLocation ca_where;
  for (const Entry& f : fields) {
    const std::string& k = f.key;
    if (k == "url") {
      NW_ASSIGN_OR_RETURN(h.url, ReadString(f.value, f.path));
      const std::string problem = HttpUrlProblem(h.url);
      if (!problem.empty()) return Error(f.value, f.path, problem + ", got '" + h.url + "'");
      has_url = true;
    } else if (k == "model") {
      NW_ASSIGN_OR_RETURN(h.model, ReadString(f.value, f.path));
      if (h.model.empty()) return Error(f.value, f.path, "must not be empty");
      has_model = true;
    } else if (k == "api") {
      NW_ASSIGN_OR_RETURN(h.api, ReadString(f.value, f.path));
      if (h.api != "completions" && h.api != "chat") {
        return Error(f.value, f.path, "must be completions or chat, got '" + h.api + "'");
      }
    } else if (k == "tokenizer") {
      NW_ASSIGN_OR_RETURN(std::string t, ReadString(f.value, f.path));
      if (t.empty()) return Error(f.value, f.path, "must not be empty");
      NW_ASSIGN_OR_RETURN(std::filesystem::path abs, ResolvePath(t));
      h.tokenizer = abs.string();
      hs.tokenizer_where = Loc(f.value, f.path);
    } else if (k == "headers") {
      NW_ASSIGN_OR_RETURN(std::vector<Entry> headers, MapEntries(f.value, f.path, Names()));
      for (const Entry& he : headers) {
        if (!IsHeaderName(he.key)) {
          return Error(he.key_node, he.path, "not a valid HTTP header name");
        }
        const std::string lower = Lower(he.key);
        if (std::find(std::begin(kSecretHeaders), std::end(kSecretHeaders), lower) !=
            std::end(kSecretHeaders)) {
          return Error(he.key_node, he.path,
                       "credentials never go in the campaign file; name an environment "
                       "variable with api_key_env or a file with api_key_file");
        }
        if (lower == "host" || lower == "content-length" || lower == "content-type" ||
            lower == "connection" || lower == "transfer-encoding") {
          return Error(he.key_node, he.path, "is set by the client; remove it");
        }
        NW_ASSIGN_OR_RETURN(std::string value, ReadString(he.value, he.path));
        if (value.find_first_of("\r\n") != std::string::npos) {
          return Error(he.value, he.path, "must not contain line breaks");
        }
        h.headers[he.key] = value;
      }
    } else if (k == "api_key_env") {
      NW_ASSIGN_OR_RETURN(h.api_key_env, ReadString(f.value, f.path));
      if (!IsEnvName(h.api_key_env)) {
        return Error(f.value, f.path,
                     "must be the name of an environment variable (letters, digits and _), not "
                     "the key itself");
      }
    } else if (k == "api_key_file") {
      NW_ASSIGN_OR_RETURN(std::string file, ReadString(f.value, f.path));
      if (file.empty()) return Error(f.value, f.path, "must not be empty");
      NW_ASSIGN_OR_RETURN(std::filesystem::path abs, ResolvePath(file));
      h.api_key_file = abs.string();
    } else if (k == "engine_params") {
      NW_ASSIGN_OR_RETURN(h.engine_params, ReadBool(f.value, f.path));
    } else if (k == "concurrency") {
      NW_ASSIGN_OR_RETURN(int64_t c, ReadInt(f.value, f.path, 1, kMaxHttpConcurrency));
      h.concurrency = static_cast<int>(c);
    } else if (k == "timeout_ms") {
      NW_ASSIGN_OR_RETURN(h.timeout_ms, ReadInt(f.value, f.path, 1, kMaxHttpMs));
    } else if (k == "retries") {
      NW_ASSIGN_OR_RETURN(int64_t r, ReadInt(f.value, f.path, 0, kMaxHttpRetries));
      h.retries = static_cast<int>(r);
    } else if (k == "ready_timeout_ms") {
      NW_ASSIGN_OR_RETURN(h.ready_timeout_ms, ReadInt(f.value, f.path, 0, kMaxHttpMs));
    } else if (k == "health_path") {
      NW_ASSIGN_OR_RETURN(h.health_path, ReadString(f.value, f.path));
      if (!h.health_path.empty() && (h.health_path.front() != '/' ||
                                     h.health_path.find_first_of(" \r\n") != std::string::npos)) {
        return Error(f.value, f.path, "must be empty or a path starting with /");
      }
    } else if (k == "server_index_topk") {
      NW_ASSIGN_OR_RETURN(int64_t t, ReadInt(f.value, f.path, 0, kMaxTopk));
      h.server_index_topk = static_cast<int>(t);
    } else if (k == "stream") {
      NW_ASSIGN_OR_RETURN(h.stream, ReadBool(f.value, f.path));
      if (h.stream) hs.stream_where = Loc(f.value, f.path);
    } else if (k == "ca_file") {
      NW_ASSIGN_OR_RETURN(std::string file, ReadString(f.value, f.path));
      if (file.empty()) return Error(f.value, f.path, "must not be empty");
      NW_ASSIGN_OR_RETURN(std::filesystem::path abs, ResolvePath(file));
      h.ca_file = abs.string();
      ca_where = Loc(f.value, f.path);
    } else if (k == "sampling") {
      NW_RETURN_IF_ERROR(ParseHttpSampling(f, &h.sampling));
    }
  }
  if (!h.ca_file.empty() && h.url.rfind("https://", 0) != 0) {
    return Error(ca_where, "ca_file is for https:// URLs; this url is " + h.url);
  }
  if (!has_url || !has_model) {
    return Error(e.value, e.path,
                 std::string("missing ") + (!has_url ? "url" : "model") +
                     ": an http backend needs at least url and model");
  }
  if (!h.api_key_env.empty() && !h.api_key_file.empty()) {
    return Error(e.value, e.path, "give api_key_env or api_key_file, not both");
  }
  if (c_.http) {
    if (!(c_.http->spec == h)) {
      return Error(hs.where, "a campaign evaluates one http backend; this one differs from " +
                                 At(c_.http->where) +
                                 " (name it `http` to refer to that one, or write one campaign "
                                 "per server)");
    }
  } else {
    c_.http = hs;
  }
  AxisValue v;
  v.value = std::string("http");
  v.where = Loc(n, path);
  out->push_back(std::move(v));
  return Status::Ok();
}

// Every "http" backend value needs the settings of a {http: {...}} somewhere in the file.
Status Parser::CheckHttpReferences() const {
  if (c_.http) return Status::Ok();
  auto check = [&](const AxisValues& values) -> Status {
    for (const AxisValue& v : values) {
      if (v.name() == "http") {
        return Error(v.where,
                     "backend 'http' needs its settings: write {http: {url: ..., model: ...}} "
                     "under matrix.backend or in an include entry");
      }
    }
    return Status::Ok();
  };
  NW_RETURN_IF_ERROR(check(c_.matrix[Ix(Axis::kBackend)]));
  for (const MatrixEntry& m : c_.include) NW_RETURN_IF_ERROR(check(m.axes[Ix(Axis::kBackend)]));
  for (const MatrixEntry& m : c_.exclude) NW_RETURN_IF_ERROR(check(m.axes[Ix(Axis::kBackend)]));
  return Status::Ok();
}

Status Parser::ParseMatrixEntries(const Entry& e, bool include, std::vector<MatrixEntry>* out) {
  if (!e.value.IsSequence()) {
    return Error(e.value, e.path, "must be a list of maps, got " + Describe(e.value));
  }
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string ipath = e.path + "[" + std::to_string(i) + "]";
    NW_ASSIGN_OR_RETURN(std::vector<Entry> fields,
                        MapEntries(item, ipath, include ? Names(kIncludeKeys) : Names(kAxisKeys)));
    if (fields.empty()) {
      return Error(item, ipath,
                   include ? "an include entry names at least one axis or setting"
                           : "an exclude entry names at least one axis (an empty one would "
                             "exclude everything)");
    }
    MatrixEntry m;
    m.where = Loc(item, ipath);
    for (const Entry& f : fields) {
      if (f.key == "max_new_tokens") {
        NW_ASSIGN_OR_RETURN(int64_t t, ReadInt(f.value, f.path, 1, kMaxNewTokens));
        m.max_new_tokens = static_cast<int>(t);
      } else if (f.key == "probe") {
        NW_ASSIGN_OR_RETURN(bool p, ReadBool(f.value, f.path));
        m.probe = p;
      } else {
        const Axis a = *AxisFromName(f.key);
        NW_RETURN_IF_ERROR(ParseAxis(a, f.value, f.path, &m.axes[Ix(a)]));
      }
    }
    out->push_back(std::move(m));
  }
  return Status::Ok();
}

Status Parser::ParseTrials(const Entry* trials, const Entry* seeds, const Entry* seed) {
  if (trials != nullptr && seeds != nullptr) {
    return Error(seeds->key_node, seeds->path,
                 "give either trials (seeds derived from seed) or seeds (listed), not both");
  }
  if (seeds != nullptr && seed != nullptr) {
    return Error(seed->key_node, seed->path,
                 "seed derives the trial seeds of `trials`; with `seeds` listed it has no effect");
  }
  if (seed != nullptr) {
    NW_ASSIGN_OR_RETURN(c_.seed, ReadInt(seed->value, seed->path, 0, INT64_MAX));
  }
  if (seeds != nullptr) {
    c_.explicit_seeds = true;
    std::vector<std::pair<int64_t, SourceLocation>> listed;
    if (seeds->value.IsSequence()) {
      if (seeds->value.size() == 0) return Error(seeds->value, seeds->path, "must not be empty");
      if (static_cast<int64_t>(seeds->value.size()) > kMaxTrials) {
        return Error(seeds->value, seeds->path,
                     "at most " + std::to_string(kMaxTrials) + " seeds per cell");
      }
      for (size_t i = 0; i < seeds->value.size(); ++i) {
        const std::string p = seeds->path + "[" + std::to_string(i) + "]";
        NW_ASSIGN_OR_RETURN(int64_t s, ReadInt(seeds->value[i], p, 0, INT64_MAX));
        listed.emplace_back(s, Loc(seeds->value[i], p));
      }
    } else {
      NW_ASSIGN_OR_RETURN(int64_t s, ReadInt(seeds->value, seeds->path, 0, INT64_MAX));
      listed.emplace_back(s, Loc(seeds->value, seeds->path));
    }
    for (size_t i = 0; i < listed.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (listed[i].first == listed[j].first) {
          return Error(listed[i].second, "duplicate seed " + std::to_string(listed[i].first) +
                                             " (also " + At(listed[j].second) + ")");
        }
      }
      c_.trial_seeds.push_back(listed[i].first);
    }
    return Status::Ok();
  }
  int64_t n = 1;
  if (trials != nullptr) {
    NW_ASSIGN_OR_RETURN(n, ReadInt(trials->value, trials->path, 1, kMaxTrials));
  }
  for (int64_t t = 0; t < n; ++t)
    c_.trial_seeds.push_back(DeriveTrialSeed(c_.seed, static_cast<int>(t)));
  return Status::Ok();
}

// The cell plan: the matrix product in axis order, minus exclude, plus include (GitHub Actions
// semantics, see docs/campaigns.md).
Status Parser::Plan(const YAML::Node& matrix_node) {
  c_.values = c_.matrix;
  const int64_t trials = static_cast<int64_t>(c_.trial_seeds.size());
  const SourceLocation matrix_where = Loc(matrix_node, "matrix");
  c_.matrix_where = matrix_where;

  int64_t product = 1;
  for (Axis a : kAllAxes) {
    product *= static_cast<int64_t>(c_.matrix[Ix(a)].size());
    if (product > kMaxMatrixCombinations) {
      return Error(matrix_where, "the matrix has more than " +
                                     std::to_string(kMaxMatrixCombinations) + " combinations");
    }
  }
  // Matching exclude and include entries against the combinations is a product of their counts:
  // bounded as a whole, before it can run for minutes.
  int64_t steps = 0;
  auto spend = [&](int64_t n, const SourceLocation& where) -> Status {
    steps += n;
    if (steps <= kMaxPlanSteps) return Status::Ok();
    return Error(where, "matching the matrix (" + std::to_string(product) +
                            " combinations) against " + std::to_string(c_.exclude.size()) +
                            " exclude and " + std::to_string(c_.include.size()) +
                            " include entries takes more than " + std::to_string(kMaxPlanSteps) +
                            " steps; narrow the matrix or use fewer, broader entries");
  };
  auto check_ceiling = [&](const SourceLocation& where) -> Status {
    if (static_cast<int64_t>(c_.cells.size()) * trials > kMaxJobsCeiling) {
      return Error(where, "the campaign expands to more than " + std::to_string(kMaxJobsCeiling) +
                              " jobs, the most any campaign may have");
    }
    return Status::Ok();
  };

  // For each exclude entry and axis: which matrix values it names (empty: every value).
  struct Mask {
    std::array<std::vector<char>, kNumAxes> allowed;
    int64_t hits = 0;
  };
  std::vector<Mask> masks(c_.exclude.size());
  for (size_t e = 0; e < c_.exclude.size(); ++e) {
    for (Axis a : kAllAxes) {
      const AxisValues& named = c_.exclude[e].axes[Ix(a)];
      if (named.empty()) continue;
      auto& m = masks[e].allowed[Ix(a)];
      NW_RETURN_IF_ERROR(
          spend(static_cast<int64_t>(c_.matrix[Ix(a)].size() * named.size()), c_.exclude[e].where));
      m.assign(c_.matrix[Ix(a)].size(), 0);
      for (size_t i = 0; i < c_.matrix[Ix(a)].size(); ++i) {
        for (const AxisValue& v : named) {
          if (v.value == c_.matrix[Ix(a)][i].value) m[i] = 1;
        }
      }
    }
  }

  Cell cell;
  cell.max_new_tokens = c_.max_new_tokens;
  cell.probe = c_.probe;
  for (int64_t k = 0; k < product; ++k) {
    NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(masks.size()), matrix_where));
    bool excluded = false;
    for (Mask& m : masks) {
      bool match = true;
      for (size_t a = 0; a < kNumAxes && match; ++a) {
        if (!m.allowed[a].empty() && !m.allowed[a][cell.index[a]]) match = false;
      }
      if (match) {
        ++m.hits;
        excluded = true;
      }
    }
    if (!excluded) {
      c_.cells.push_back(cell);
      NW_RETURN_IF_ERROR(check_ceiling(matrix_where));
    }
    for (size_t a = kNumAxes; a-- > 0;) {  // odometer: needle_position turns fastest
      if (++cell.index[a] < c_.matrix[a].size()) break;
      cell.index[a] = 0;
    }
  }
  for (size_t e = 0; e < masks.size(); ++e) {
    if (masks[e].hits == 0) {
      const SourceLocation& w = c_.exclude[e].where;
      c_.warnings.push_back(
          FormatLocated(source_, w.line, w.column, w.path + ": matches no combination"));
    }
  }

  for (size_t e = 0; e < c_.include.size(); ++e) {
    const MatrixEntry& inc = c_.include[e];
    // Indices of the named values in the value tables (values new to an axis are appended).
    std::array<std::vector<uint32_t>, kNumAxes> named;
    for (Axis a : kAllAxes) {
      AxisValues& table = c_.values[Ix(a)];
      for (const AxisValue& v : inc.axes[Ix(a)]) {
        NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(table.size()), inc.where));
        size_t i = 0;
        while (i < table.size() && !(table[i].value == v.value)) ++i;
        if (i == table.size()) table.push_back(v);
        named[Ix(a)].push_back(static_cast<uint32_t>(i));
      }
    }
    auto apply = [&](Cell& target) {
      if (inc.max_new_tokens) target.max_new_tokens = *inc.max_new_tokens;
      if (inc.probe) target.probe = *inc.probe;
    };
    // Created cells take the matrix's values on the axes the entry does not name; an exclude
    // entry that names one of those axes still removes them.
    auto excluded_fill = [&](const Cell& created) {
      for (const MatrixEntry& ex : c_.exclude) {
        bool names_fill = false;
        bool match = true;
        for (Axis a : kAllAxes) {
          const AxisValues& vals = ex.axes[Ix(a)];
          if (vals.empty()) continue;
          if (inc.axes[Ix(a)].empty()) names_fill = true;
          const AxisValue& cv = c_.values[Ix(a)][created.index[Ix(a)]];
          if (std::none_of(vals.begin(), vals.end(),
                           [&](const AxisValue& v) { return v.value == cv.value; })) {
            match = false;
            break;
          }
        }
        if (match && names_fill) return true;
      }
      return false;
    };

    // Each combination of the entry's listed values is one include item.
    std::array<size_t, kNumAxes> pick{};
    bool any_created = false;
    bool any_extended = false;
    for (;;) {
      NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(c_.cells.size()), inc.where));
      std::vector<Cell*> matched;
      for (Cell& existing : c_.cells) {
        bool match = true;
        for (size_t a = 0; a < kNumAxes && match; ++a) {
          if (!named[a].empty() && existing.index[a] != named[a][pick[a]]) match = false;
        }
        if (match) matched.push_back(&existing);
      }
      if (!matched.empty()) {
        for (Cell* m : matched) apply(*m);
        any_extended = true;
      } else {
        // New cells: the named values, crossed with the matrix values of the other axes.
        Cell created;
        created.max_new_tokens = c_.max_new_tokens;
        created.probe = c_.probe;
        created.include = static_cast<int>(e);
        apply(created);
        std::array<size_t, kNumAxes> fill{};
        for (;;) {
          NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(c_.exclude.size()), inc.where));
          for (size_t a = 0; a < kNumAxes; ++a) {
            created.index[a] =
                named[a].empty() ? static_cast<uint32_t>(fill[a]) : named[a][pick[a]];
          }
          if (!excluded_fill(created)) {
            c_.cells.push_back(created);
            any_created = true;
            NW_RETURN_IF_ERROR(check_ceiling(inc.where));
          }
          size_t a = kNumAxes;
          while (a-- > 0) {
            if (!named[a].empty()) continue;
            if (++fill[a] < c_.matrix[a].size()) break;
            fill[a] = 0;
          }
          if (a == static_cast<size_t>(-1)) break;
        }
      }
      size_t a = kNumAxes;
      while (a-- > 0) {
        if (named[a].empty()) continue;
        if (++pick[a] < named[a].size()) break;
        pick[a] = 0;
      }
      if (a == static_cast<size_t>(-1)) break;
    }
    if (!any_created && any_extended && !inc.max_new_tokens && !inc.probe) {
      c_.warnings.push_back(FormatLocated(
          source_, inc.where.line, inc.where.column,
          inc.where.path + ": names only existing combinations and sets nothing; it adds no jobs"));
    }
  }
  if (c_.cells.empty()) return Error(matrix_where, "exclude removes every combination");
  return Status::Ok();
}

// Cross-axis rules each cell must satisfy: a negative needle offset must fit in the context.
Status Parser::CheckCells() const {
  for (const Cell& cell : c_.cells) {
    // A fault runs only on a backend that replays it (its catalog entry's faults; http: none).
    const AxisValue& fault = c_.value(cell, Axis::kFault);
    if (fault.name() != "none") {
      const AxisValue& backend = c_.value(cell, Axis::kBackend);
      const BackendInfo* info = FindBackend(backend.name());
      const Fault f = *ParseFault(fault.name());
      const Status ok =
          info != nullptr
              ? CheckBackendFault(*info, f)
              : Status::Unsupported("backend '" + backend.name() + "' replays no fault");
      if (!ok.ok()) {
        return Error(fault.where, ok.message() + " (backend from " + At(backend.where) +
                                      "); exclude the combination");
      }
    }
    const AxisValue& pos = c_.value(cell, Axis::kNeedlePosition);
    const AxisValue& len = c_.value(cell, Axis::kContextLength);
    if (pos.number() < 0 && -pos.number() >= static_cast<double>(len.integer())) {
      return Error(pos.where, "offset " + pos.ToString() +
                                  " puts the needle before the start of "
                                  "a " +
                                  Plural(len.integer(), "token") + " context (" + At(len.where) +
                                  "); drop one of them or exclude the combination");
    }
  }
  // Probes come from the indexer top-k in a whole (non-streamed) answer; a streamed one has none.
  if (c_.http && c_.http->spec.stream && c_.http->spec.api == "completions") {
    for (const Cell& cell : c_.cells) {
      if (c_.value(cell, Axis::kBackend).name() == "http" && cell.probe) {
        return Error(c_.http->stream_where,
                     "a streamed answer carries no indexer top-k, so the http cells cannot probe; "
                     "set probe: false (or stream: false: probes and latency figures need separate "
                     "campaigns)");
      }
    }
  }
  // Without engine_params the http backend sends neither topk nor precision to the server:
  // http cells that differ only in them would send identical requests and be reported as
  // different configurations.
  if (c_.http && !c_.http->spec.engine_params) {
    for (Axis a : {Axis::kTopk, Axis::kPrecision}) {
      const AxisValue* first = nullptr;
      for (const Cell& cell : c_.cells) {
        if (c_.value(cell, Axis::kBackend).name() != "http") continue;
        const AxisValue& v = c_.value(cell, a);
        if (first == nullptr) {
          first = &v;
        } else if (v.ToString() != first->ToString()) {
          const std::string axis(AxisName(a));
          return Error(v.where, "the http backend (" + At(c_.http->where) + ") does not send " +
                                    axis +
                                    " to the server (engine_params is false), so its cells "
                                    "with " +
                                    axis + " " + first->ToString() + " and " + v.ToString() +
                                    " would be identical requests reported as different "
                                    "configurations; keep one " +
                                    axis + " for http (exclude {backend: http, " + axis + ": " +
                                    v.ToString() +
                                    "}), or set engine_params: true if the server is `nw serve`");
        }
      }
    }
  }
  return Status::Ok();
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

Result<Criterion> Parser::RunCriterionOnly(std::string_view text) {
  NW_ASSIGN_OR_RETURN(YAML::Node root, LoadRoot(text));
  // Only `criterion` is read: other keys (of this or a later version) are not judged here.
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar() || it->first.Scalar() != "criterion") continue;
    NW_RETURN_IF_ERROR(ParseCriterion(Entry{"criterion", it->first, it->second, "criterion"}));
  }
  return c_.criterion;
}

Result<Campaign> Parser::Run(std::string_view text) {
  NW_ASSIGN_OR_RETURN(YAML::Node root, LoadRoot(text));
  c_.source_name = source_;
  c_.text = std::string(text);
  c_.source_sha256 = Sha256Hex(text);

  NW_ASSIGN_OR_RETURN(std::vector<Entry> top, MapEntries(root, "", kTopKeys));
  std::map<std::string, const Entry*> by_key;
  for (const Entry& e : top) by_key[e.key] = &e;
  auto get = [&](std::string_view k) -> const Entry* {
    auto it = by_key.find(std::string(k));
    return it == by_key.end() ? nullptr : it->second;
  };
  const SourceLocation doc_where = Loc(root, "");
  auto missing = [&](std::string_view field) {
    SourceLocation w = doc_where;
    w.path = "";
    return Error(w, "missing required field '" + std::string(field) + "'");
  };

  const Entry* name = get("name");
  if (name == nullptr) return missing("name");
  NW_ASSIGN_OR_RETURN(c_.name, ReadString(name->value, name->path));
  if (!ValidName(c_.name)) {
    return Error(name->value, name->path,
                 "must be lowercase letters, digits, '.', '_' and '-' (at most 64, starting "
                 "with a letter or digit), got '" +
                     c_.name + "'");
  }
  if (const Entry* d = get("description")) {
    NW_ASSIGN_OR_RETURN(c_.description, ReadString(d->value, d->path));
  }
  // `model` may be left out only when every cell runs on the http backend (checked after the
  // plan).
  const Entry* model = get("model");
  if (model != nullptr) {
    NW_ASSIGN_OR_RETURN(c_.model, ReadString(model->value, model->path));
    if (c_.model.empty()) return Error(model->value, model->path, "must not be empty");
    c_.model_where = Loc(model->value, model->path);
    NW_ASSIGN_OR_RETURN(c_.model_dir, ResolvePath(c_.model));
  }

  if (const Entry* p = get("precisions")) NW_RETURN_IF_ERROR(ParsePrecisions(*p));

  const Entry* matrix = get("matrix");
  if (matrix == nullptr) return missing("matrix");
  NW_ASSIGN_OR_RETURN(std::vector<Entry> axes, MapEntries(matrix->value, "matrix", kAxisKeys));
  std::array<const Entry*, kNumAxes> axis_entry{};
  for (const Entry& e : axes) axis_entry[Ix(*AxisFromName(e.key))] = &e;
  for (Axis a : {Axis::kTask, Axis::kHaystack}) {
    const Entry* top_level = get(AxisName(a));
    if (top_level == nullptr) continue;
    if (axis_entry[Ix(a)] != nullptr) {
      return Error(axis_entry[Ix(a)]->key_node, axis_entry[Ix(a)]->path,
                   "given both here and at the top level (" +
                       At(Loc(top_level->key_node, top_level->path)) + "); keep one");
    }
    axis_entry[Ix(a)] = top_level;
  }
  for (Axis a : kAllAxes) {
    const Entry* e = axis_entry[Ix(a)];
    AxisValues& values = c_.matrix[Ix(a)];
    if (e != nullptr) {
      NW_RETURN_IF_ERROR(ParseAxis(a, e->value, e->path, &values));
      continue;
    }
    std::string def;
    if (a == Axis::kTask) def = std::string(NiahTaskName(NiahTask::kSingle));
    if (a == Axis::kHaystack) def = std::string(NiahHaystackName(NiahHaystack::kNoise));
    if (a == Axis::kBackend) def = "cpu";
    if (a == Axis::kPrecision) def = "fp32";
    if (a == Axis::kFault) def = "none";
    if (def.empty()) {
      return Error(matrix->key_node, "matrix",
                   "missing required axis '" + std::string(AxisName(a)) + "'");
    }
    AxisValue v;
    v.value = def;
    v.where.path = std::string(AxisName(a)) + " (default)";
    values.push_back(std::move(v));
  }
  if (const Entry* e = get("include"))
    NW_RETURN_IF_ERROR(ParseMatrixEntries(*e, true, &c_.include));
  if (const Entry* e = get("exclude"))
    NW_RETURN_IF_ERROR(ParseMatrixEntries(*e, false, &c_.exclude));
  NW_RETURN_IF_ERROR(ParseTrials(get("trials"), get("seeds"), get("seed")));
  if (const Entry* g = get("generation")) {
    NW_ASSIGN_OR_RETURN(std::vector<Entry> gen, MapEntries(g->value, g->path, kGenerationKeys));
    for (const Entry& f : gen) {
      NW_ASSIGN_OR_RETURN(int64_t t, ReadInt(f.value, f.path, 1, kMaxNewTokens));
      c_.max_new_tokens = static_cast<int>(t);
    }
  }
  if (const Entry* p = get("probe")) {
    NW_ASSIGN_OR_RETURN(c_.probe, ReadBool(p->value, p->path));
  }
  if (const Entry* m = get("max_jobs")) {
    NW_ASSIGN_OR_RETURN(int64_t limit, ReadInt(m->value, m->path, 1, kMaxJobsCeiling));
    c_.max_jobs = limit;
    c_.max_jobs_where = Loc(m->value, m->path);
  }
  if (const Entry* e = get("criterion")) NW_RETURN_IF_ERROR(ParseCriterion(*e));
  if (const Entry* e = get("search")) NW_RETURN_IF_ERROR(ParseSearch(*e));

  NW_RETURN_IF_ERROR(CheckHttpReferences());
  NW_RETURN_IF_ERROR(Plan(matrix->key_node));
  NW_RETURN_IF_ERROR(CheckCells());
  if (model == nullptr) {
    for (const Cell& cell : c_.cells) {
      if (c_.value(cell, Axis::kBackend).name() != "http") return missing("model");
    }
  }
  if (c_.http && c_.http->spec.tokenizer.empty() && model == nullptr) {
    return Error(c_.http->where,
                 "tokenizer: required when the campaign has no model (the tokenizer.json of the "
                 "server's model, so prompt lengths are exact)");
  }

  for (const AxisValue& v : c_.values[Ix(Axis::kPrecision)]) {
    auto custom = custom_.find(v.name());
    c_.precisions[v.name()] =
        custom != custom_.end() ? custom->second : *NamedPrecisionProfile(v.name());
  }
  for (const std::string& name_defined : c_.custom_precisions) {
    if (!c_.precisions.count(name_defined)) {
      c_.warnings.push_back(FormatLocated(
          source_, 0, 0,
          "precisions." + name_defined + ": defined but not used by the matrix or include"));
    }
  }
  return std::move(c_);
}

Status Parser::ParseCriterion(const Entry& e) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(e.value, e.path, kCriterionKeys));
  Criterion c;
  for (const Entry& f : fields) {
    NW_ASSIGN_OR_RETURN(double v, ReadDouble(f.value, f.path));
    if (f.key == "pass_rate") {
      if (!(v > 0 && v < 1)) {
        return Error(
            f.value, f.path,
            "must be greater than 0 and less than 1 (a pass rate), got " + f.value.Scalar());
      }
      c.pass_rate = v;
    } else {
      if (!(v >= 0.5 && v < 1)) {
        return Error(f.value, f.path,
                     "must be at least 0.5 and less than 1, got " + f.value.Scalar());
      }
      c.confidence = v;
    }
  }
  c_.criterion = c;
  c_.criterion_stated = true;
  c_.criterion_where = Loc(e.key_node, e.path);
  return Status::Ok();
}

Status Parser::ParseSearch(const Entry& e) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> kinds, MapEntries(e.value, e.path, kSearchKeys));
  if (kinds.empty()) return Error(e.value, e.path, "must name a search (allowed: boundary)");
  const Entry& b = kinds.front();
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(b.value, b.path, kBoundaryKeys));
  BoundarySearchSettings s;
  s.where = Loc(e.key_node, e.path);
  const auto pool = static_cast<int64_t>(c_.trial_seeds.size());
  for (const Entry& f : fields) {
    if (f.key == "first_trials") {
      NW_ASSIGN_OR_RETURN(int64_t t, ReadInt(f.value, f.path, 1, kMaxTrials));
      if (t > pool) {
        return Error(f.value, f.path,
                     "first_trials " + std::to_string(t) + " is more than the campaign's " +
                         std::to_string(pool) +
                         " trials (trials are the pool each length draws from)");
      }
      s.first_trials = static_cast<int>(t);
    } else if (f.key == "confidence") {
      NW_ASSIGN_OR_RETURN(s.confidence, ReadDouble(f.value, f.path));
      if (!(s.confidence >= 0.5 && s.confidence < 1)) {
        return Error(f.value, f.path,
                     "must be at least 0.5 and less than 1, got " + f.value.Scalar());
      }
      // The search decides with the campaign's criterion: its confidence is the criterion's.
      if (c_.criterion_stated && s.confidence != c_.criterion.confidence) {
        return Error(f.value, f.path,
                     "differs from criterion.confidence (" + At(c_.criterion_where) +
                         "); the search decides with the campaign's criterion: remove this "
                         "key or make them equal");
      }
      if (!c_.criterion_stated) c_.criterion.confidence = s.confidence;
    } else {
      NW_ASSIGN_OR_RETURN(int64_t budget, ReadInt(f.value, f.path, 1, kMaxJobsCeiling));
      s.budget = budget;
    }
  }
  s.confidence = c_.criterion.confidence;
  s.pass_rate = c_.criterion.pass_rate;
  c_.search = s;
  return Status::Ok();
}

}  // namespace

Result<Campaign> ParseCampaignText(std::string_view text, const std::string& source_name,
                                   const ParseOptions& options) {
  Parser parser(source_name, options);
  try {
    return parser.Run(text);
  } catch (const YAML::Exception& e) {
    // Node accessors do not throw on the paths Run takes; this is the module edge regardless.
    return Status::InvalidArgument(FormatLocated(source_name,
                                                 e.mark.line >= 0 ? e.mark.line + 1 : 0,
                                                 e.mark.column + 1, "YAML error: " + e.msg));
  }
}

bool IsValidCampaignName(std::string_view name) { return ValidName(name); }

Result<Criterion> ParseCampaignCriterion(std::string_view text, const std::string& source_name) {
  Parser parser(source_name, ParseOptions{});
  try {
    return parser.RunCriterionOnly(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(FormatLocated(source_name,
                                                 e.mark.line >= 0 ? e.mark.line + 1 : 0,
                                                 e.mark.column + 1, "YAML error: " + e.msg));
  }
}

Result<Campaign> ParseCampaignFile(const std::filesystem::path& path, const ParseOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return Status::NotFound(path.string() + ": no such campaign file");
  if (!fs::is_regular_file(st)) {
    return Status::InvalidArgument(path.string() + ": not a regular file");
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::IoError(path.string() + ": " + ec.message());
  if (size > options.max_bytes) {
    return Status::InvalidArgument(path.string() + ": file is " + std::to_string(size) +
                                   " bytes, more than the limit of " +
                                   std::to_string(options.max_bytes));
  }
  NW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ParseOptions opts = options;
  opts.base_dir = fs::absolute(path, ec).parent_path();
  if (ec) return Status::IoError(path.string() + ": " + ec.message());
  return ParseCampaignText(text, path.string(), opts);
}

}  // namespace nw
