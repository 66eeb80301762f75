// Campaigns: the YAML file a user writes, validated into typed values, resolved against a model
// and expanded into content-addressed JobSpecs. The schema is documented in docs/campaigns.md.
//
//   ParseCampaignFile / ParseCampaignText   YAML -> Campaign (schema, values, include/exclude,
//                                           the cell plan). Needs no model.
//   ResolveCampaign                         Campaign + model folder -> ResolvedCampaign (digest,
//                                           config limits, the job limit).
//   ExpandCampaign                          ResolvedCampaign -> JobSpecs, in a documented order.
//
// Errors read "<file>:<line>:<column>: <field path>: <what is wrong>", e.g.
// "quickstart.yaml:9:19: matrix.topk[2]: must be >= 1, got 0". They are InvalidArgument, except
// NotFound/IoError for an unreadable campaign file and, for model problems (reported at the
// `model` field), the code LocateModel or LoadModelConfig returned. Campaign::warnings holds what
// is legal but probably unintended.
// Thread-safety: pure functions over values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "common/verdict.h"
#include "engine/checkpoint/config.h"
#include "engine/precision.h"
#include "protocol/job.h"

namespace nw {

/// Jobs a campaign may expand to unless the campaign (`max_jobs`) or the CLI (--max-jobs) says
/// otherwise.
inline constexpr int64_t kDefaultMaxJobs = 10'000;
/// Jobs no campaign may expand to, whatever the limits say (keeps the plan in memory).
inline constexpr int64_t kMaxJobsCeiling = 1'000'000;

/// Where a value came from: 1-based line and column in the YAML text and the field path.
struct SourceLocation {
  int line = 0;  // 0: not from the file (a default)
  int column = 0;
  std::string path;  // "matrix.topk[2]", "include[0].precision", "task (default)"
};

/// The matrix axes, in expansion order: jobs vary slowest in task and fastest in needle_position.
enum class Axis : int {
  kTask,
  kHaystack,
  kBackend,
  kPrecision,
  kFault,  // known-bug replay (engine/fault.h); default none
  kTopk,
  kContextLength,
  kNeedlePosition,
};
inline constexpr size_t kNumAxes = 8;
inline constexpr std::array<Axis, kNumAxes> kAllAxes = {
    Axis::kTask,  Axis::kHaystack, Axis::kBackend,       Axis::kPrecision,
    Axis::kFault, Axis::kTopk,     Axis::kContextLength, Axis::kNeedlePosition,
};
/// The YAML key of an axis: "task", "haystack", "backend", "precision", "fault", "topk",
/// "context_length", "needle_position".
std::string_view AxisName(Axis axis);
std::optional<Axis> AxisFromName(std::string_view name);

/// One value of an axis. task, haystack, backend, precision and fault hold a name (std::string);
/// topk and context_length an integer (int64_t); needle_position a double (a fraction in [0, 1], or
/// a negative whole number: the needle ends that many tokens before the end of the prompt).
struct AxisValue {
  std::variant<std::string, int64_t, double> value;
  SourceLocation where;

  /// "fp32", "512", "0.5", "-30".
  std::string ToString() const;
  const std::string& name() const { return std::get<std::string>(value); }
  int64_t integer() const { return std::get<int64_t>(value); }
  double number() const { return std::get<double>(value); }
};
using AxisValues = std::vector<AxisValue>;

/// One `include` or `exclude` entry. For each axis, the values it names (empty: the entry does not
/// name the axis). Several values mean "any of" in exclude and "each of" in include.
struct MatrixEntry {
  std::array<AxisValues, kNumAxes> axes;
  std::optional<int> max_new_tokens;  // include only: per-cell override of generation
  std::optional<bool> probe;          // include only: per-cell override of probe
  SourceLocation where;
};

/// One combination of axis values: an index per axis into Campaign::values, plus the per-cell
/// settings.
struct Cell {
  std::array<uint32_t, kNumAxes> index{};
  int max_new_tokens = 16;
  bool probe = false;
  int include = -1;  // -1: from the matrix; else the include entry that created the cell
};

/// The campaign's `http` backend, written as a backend value `{http: {url: ..., model: ...}}`
/// (docs/http.md). A campaign has at most one; in the plan it is the backend value "http", and
/// include/exclude entries may name it as `http`.
struct HttpBackendSettings {
  HttpBackendSpec spec;            // tokenizer: absolute path, "" = the model's tokenizer.json;
                                   // tokenizer_digest is filled in by ResolveCampaign
  SourceLocation where;            // the `http` key
  SourceLocation tokenizer_where;  // the tokenizer field (where, when it was not given)
  SourceLocation stream_where;     // the stream field, when it is true
};

/// `search: {boundary: {...}}`: an adaptive search for the boundary along context_length instead
/// of the whole grid (docs/campaigns.md, "Boundary search"). The grid is still the plan: the
/// search only chooses which of its jobs run, so its jobs are the grid's jobs (same keys).
struct BoundarySearchSettings {
  int first_trials = 1;           // trials at a length before it is called passing
  double confidence = 0.95;       // the campaign criterion's confidence (two-sided level)
  double pass_rate = 0.9;         // the campaign criterion's pass_rate: found / lost threshold
  std::optional<int64_t> budget;  // jobs at most per line (configuration x needle position)
  SourceLocation where;           // the `search` key
};

struct Campaign {
  std::string source_name;    // the file path as given, or ParseCampaignText's source_name
  std::string source_sha256;  // sha256 of the YAML text
  std::string text;           // the YAML text as read

  std::string name;
  std::string description;
  std::string model;                // as written; empty only when every cell runs on http
  std::filesystem::path model_dir;  // absolute: `model` resolved against the file's folder
  SourceLocation model_where;
  std::optional<HttpBackendSettings> http;  // the http backend, if a cell uses it

  /// The axes as written (defaults filled in), values in file order.
  std::array<AxisValues, kNumAxes> matrix;
  SourceLocation matrix_where;  // the `matrix` key
  std::vector<MatrixEntry> include;
  std::vector<MatrixEntry> exclude;
  /// Every profile a cell uses, by name: built-in (NamedPrecisionProfile) or campaign-defined.
  std::map<std::string, PrecisionProfile> precisions;
  /// Names defined under `precisions:` in the file, in file order.
  std::vector<std::string> custom_precisions;

  int64_t seed = 0;
  bool explicit_seeds = false;       // `seeds:` was given (else `trials:`)
  std::vector<int64_t> trial_seeds;  // one per trial: DeriveTrialSeed(seed, t) or as listed
  int max_new_tokens = 16;           // generation.max_new_tokens
  bool probe = false;
  std::optional<int64_t> max_jobs;  // as declared in the file
  SourceLocation max_jobs_where;
  std::optional<BoundarySearchSettings> search;  // `search:`; absent: run the whole grid
  /// `criterion: {pass_rate, confidence}`: what reports, the boundary search and the gate call
  /// found / lost / undecided (common/verdict.h). Defaults when not stated.
  Criterion criterion;
  bool criterion_stated = false;
  SourceLocation criterion_where;  // the `criterion` key (line 0 when defaulted)

  /// The plan. values[axis]: the matrix's values, then values only include entries add.
  std::array<AxisValues, kNumAxes> values;
  /// The combinations after exclude and include, in expansion order (see ExpandCampaign).
  std::vector<Cell> cells;
  /// Things that are legal but probably not meant (an exclude entry that matches nothing, ...).
  std::vector<std::string> warnings;

  const AxisValue& value(const Cell& cell, Axis axis) const {
    return values[static_cast<size_t>(axis)][cell.index[static_cast<size_t>(axis)]];
  }
  int64_t job_count() const {
    return static_cast<int64_t>(cells.size()) * static_cast<int64_t>(trial_seeds.size());
  }
};

/// Backends a campaign may name unless ParseOptions says otherwise: every name of the engine's
/// backend catalog (engine/backend_catalog.h), whether or not this build can run it.
std::vector<std::string> KnownBackends();

struct ParseOptions {
  std::vector<std::string> backends = KnownBackends();
  bool allow_http = true;  // accept the http backend ({http: {...}} and its name "http")
  /// ParseCampaignText only: folder that a relative `model` resolves against (empty: the current
  /// directory). ParseCampaignFile uses the file's folder.
  std::filesystem::path base_dir;
  /// Guards applied before any YAML node is built (yaml-cpp event parser).
  size_t max_bytes = 1 << 20;    // document size
  int64_t max_events = 100'000;  // parser events (scalars, collection starts, aliases)
  int64_t max_nodes = 100'000;   // nodes with every alias expanded (alias bombs)
  int max_aliases = 256;
  int max_depth = 32;  // collection nesting
};

Result<Campaign> ParseCampaignText(std::string_view text, const std::string& source_name,
                                   const ParseOptions& options = {});
Result<Campaign> ParseCampaignFile(const std::filesystem::path& path,
                                   const ParseOptions& options = {});
/// Only the criterion of a campaign's YAML text (`criterion:`, or the defaults), validated as
/// ParseCampaignText validates it; the rest of the file is not checked. Reports and the gate use
/// it on the text stored with a campaign.
Result<Criterion> ParseCampaignCriterion(std::string_view text, const std::string& source_name);

/// A valid campaign name (and baseline name): lowercase letters, digits, '.', '_' and '-', at
/// most 64 characters, starting with a letter or digit.
bool IsValidCampaignName(std::string_view name);

struct ResolveOptions {
  /// Use this model folder instead of the campaign's `model` (e.g. `nw run --model`).
  std::optional<std::filesystem::path> model_dir;
  /// The job limit. Precedence: this (`--max-jobs`), then the campaign's max_jobs, then
  /// default_max_jobs. Never above kMaxJobsCeiling.
  std::optional<int64_t> max_jobs;
  int64_t default_max_jobs = kDefaultMaxJobs;
};

struct ResolvedCampaign {
  Campaign campaign;                // campaign.http (if any) with its tokenizer and digest
  std::filesystem::path model_dir;  // absolute; empty for a campaign without a model
  std::string model_digest;         // LocateModel's digest; empty without a model
  ModelConfig model_config;
  int64_t max_jobs = kDefaultMaxJobs;  // the limit that was applied
};

/// Locates the model (LocateModel), loads its config (LoadModelConfig), rejects context lengths
/// longer than max_position_embeddings and plans with more jobs than the limit. With an http
/// backend it also reads the tokenizer (the http settings' or the model's), records its sha256 and
/// checks that it loads; context lengths of http cells are the server's to judge. A campaign
/// without a model (every cell on http) skips the model steps.
Result<ResolvedCampaign> ResolveCampaign(const Campaign& campaign,
                                         const ResolveOptions& options = {});

/// One JobSpec per (cell, trial). Order: cells in Campaign::cells order (the matrix product with
/// task outermost and needle_position innermost, values in file order, excluded cells dropped;
/// then cells created by include entries, in entry order), trials innermost.
Result<std::vector<JobSpec>> ExpandCampaign(const ResolvedCampaign& resolved);

/// The seed of trial `trial` when a campaign says `trials:`: the first 52 bits of
/// sha256("nw-trial-seed/v1:<seed>:<trial>"). Stable across builds (part of job keys).
int64_t DeriveTrialSeed(int64_t campaign_seed, int trial);

/// sha256 over the sorted job keys: equal for two campaigns that expand to the same set of jobs,
/// whatever their names, comments or order.
std::string CampaignFingerprint(const std::vector<JobSpec>& jobs);

}  // namespace nw
