// ParseCampaignText / ParseCampaignFile: YAML -> Campaign. This file reads the top-level fields
// and holds the campaign semantics (trials and seeds, criterion, search, precision profiles);
// campaign_parser.h lists the parser's other files (YAML readers, axes, http block, plan).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "common/file_io.h"
#include "common/sha256.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/campaign_parser.h"
#include "coordinator/campaign/job_check.h"
#include "coordinator/campaign/yaml_guard.h"
#include "engine/backend_catalog.h"
#include "task/niah.h"

namespace nw {
namespace campaign_internal {

std::string FormatDouble(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
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
  NW_RETURN_IF_ERROR(CheckHttpTokenizer(model != nullptr));

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

}  // namespace campaign_internal

using campaign_internal::Parser;
using campaign_internal::ValidName;

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

std::string AxisValue::ToString() const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  return campaign_internal::FormatDouble(std::get<double>(value));
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