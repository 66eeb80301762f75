// The campaign parser's internals, shared by its files (internal to nw_campaign): the limits and
// key lists, the YAML scalar readers, and the Parser class. Its methods are in files by the job
// they do:
//   campaign_parse.cc  the top-level fields and campaign semantics (Run, trials, criterion,
//                      search, precisions) and the public entry points (campaign.h);
//   campaign_yaml.cc   YAML readers: map entries with suggestions, typed scalars, the root;
//   campaign_axes.cc   axis values: scalars, ranges and their checks;
//   campaign_http.cc   the http backend block ({http: {url: ..., model: ...}}) and its checks;
//   campaign_plan.cc   the cell plan (matrix product, exclude, include) and cross-axis checks.
// Thread-safety: a Parser parses one text on one thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/yaml_guard.h"

namespace nw::campaign_internal {

// kMaxTopk, kMaxContextLength, kMaxNewTokens, kMaxTrials, kMaxHttp*: job_check.h (the daemon
// checks submitted jobs against the same limits).
inline constexpr int64_t kMaxRangeValues = 10'000;
inline constexpr int64_t kMaxMatrixCombinations = 10'000'000;
// Steps of the plan (combinations x exclude entries, include items x cells, ...): well under a
// second of work. Counted as the plan is made, so no file under the size limit takes longer.
inline constexpr int64_t kMaxPlanSteps = 50'000'000;
inline constexpr size_t kMaxNameLength = 64;

inline constexpr std::string_view kCoreTagPrefix = "tag:yaml.org,2002:";

using Names = std::span<const std::string_view>;

inline constexpr std::string_view kTopKeys[] = {
    "name",       "description", "model",      "task",   "haystack", "matrix",
    "include",    "exclude",     "precisions", "trials", "seeds",    "seed",
    "generation", "probe",       "max_jobs",   "search", "criterion"};
inline constexpr std::string_view kAxisKeys[] = {"task",           "haystack",       "backend",
                                                 "precision",      "fault",          "topk",
                                                 "context_length", "needle_position"};
inline constexpr std::string_view kIncludeKeys[] = {
    "task", "haystack",       "backend",         "precision",      "fault",
    "topk", "context_length", "needle_position", "max_new_tokens", "probe"};
inline constexpr std::string_view kProfileKeys[] = {"base",    "weights", "activations",
                                                    "index_q", "index_k", "kv"};
inline constexpr std::string_view kRangeKinds[] = {"linear", "geometric"};
inline constexpr std::string_view kLinearKeys[] = {"from", "to", "step", "count"};
inline constexpr std::string_view kGeometricKeys[] = {"from", "to", "factor", "count"};
inline constexpr std::string_view kGenerationKeys[] = {"max_new_tokens"};
inline constexpr std::string_view kSearchKeys[] = {"boundary"};
inline constexpr std::string_view kCriterionKeys[] = {"pass_rate", "confidence"};
inline constexpr std::string_view kBoundaryKeys[] = {"first_trials", "confidence", "budget"};
inline constexpr std::string_view kHttpTopKeys[] = {"http"};
inline constexpr std::string_view kHttpKeys[] = {"url",          "model",
                                                 "api",          "tokenizer",
                                                 "headers",      "api_key_env",
                                                 "api_key_file", "engine_params",
                                                 "concurrency",  "timeout_ms",
                                                 "retries",      "ready_timeout_ms",
                                                 "health_path",  "server_index_topk",
                                                 "stream",       "sampling",
                                                 "ca_file"};
inline constexpr std::string_view kSamplingKeys[] = {"temperature", "top_p",      "top_k",
                                                     "seed",        "min_tokens", "max_tokens"};
// Request headers that carry credentials: they belong in api_key_env / api_key_file.
inline constexpr std::string_view kSecretHeaders[] = {"authorization", "proxy-authorization",
                                                      "x-api-key", "api-key", "cookie"};

// Shortest text that reads back as the same double ("0.5", "1", "-30").
std::string FormatDouble(double v);
size_t EditDistance(std::string_view a, std::string_view b);
std::string JoinNames(Names names);
// "; did you mean 'topk'?" when one known name is close, else "".
std::string Suggestion(std::string_view word, Names known);
bool ValidName(std::string_view s);
// YAML 1.2 core-schema integer: [-+]?[0-9]+. nullopt if the text is not one; *overflow is set
// when it is one but does not fit int64.
std::optional<int64_t> ParseIntText(std::string_view s, bool* overflow);
// YAML 1.2 core-schema float or integer, finite only:
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
std::optional<double> ParseFloatText(std::string_view s);
std::optional<bool> ParseBoolText(std::string_view s);
bool IsQuoted(const YAML::Node& n);
// A plain scalar, or one with the core tag `type` (!!int, !!float, !!bool).
bool PlainOrTagged(const YAML::Node& n, std::string_view type);
// How a node reads in an error message: "a list", "the string \"16\"", "the number 1.5".
std::string Describe(const YAML::Node& n);
std::string ListNames(const std::vector<std::string>& names);
// A map with the key "http" (an http backend block, campaign_http.cc).
bool IsHttpMap(const YAML::Node& n);

inline bool IsIntegralAxis(Axis a) { return a == Axis::kTopk || a == Axis::kContextLength; }
inline bool IsNameAxis(Axis a) {
  return a == Axis::kTask || a == Axis::kHaystack || a == Axis::kBackend || a == Axis::kPrecision ||
         a == Axis::kFault;
}
inline size_t Ix(Axis a) { return static_cast<size_t>(a); }
std::string Plural(int64_t n, std::string_view word);

class Parser {
 public:
  Parser(std::string source, ParseOptions options)
      : source_(std::move(source)), options_(std::move(options)) {}

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
  Status CheckHttpCells() const;
  Status CheckHttpTokenizer(bool has_model) const;
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
  // A copy, not a reference: ParseCampaignCriterion passes a temporary (a reference to it
  // dangled once the constructor returned; AddressSanitizer's stack-use-after-scope).
  ParseOptions options_;
  Campaign c_;
  std::map<std::string, PrecisionProfile> custom_;
};

}  // namespace nw::campaign_internal
