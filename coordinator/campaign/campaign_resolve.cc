// ResolveCampaign, ExpandCampaign, CampaignFingerprint.
#include <algorithm>
#include <system_error>

#include "common/sha256.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/job_check.h"
#include "coordinator/campaign/yaml_guard.h"
#include "engine/checkpoint/model_files.h"
#include "engine/text/tokenizer.h"
#include "engine/version.h"

namespace nw {
namespace {

size_t Ix(Axis a) { return static_cast<size_t>(a); }

std::string Located(const Campaign& c, const SourceLocation& where, std::string_view msg) {
  std::string text = where.path.empty() ? std::string(msg) : where.path + ": " + std::string(msg);
  return FormatLocated(c.source_name, where.line, where.column, text);
}

// The http backend's tokenizer: the one named in its settings, else the model's; it must load,
// and its sha256 goes into every http job's key.
Result<ResolvedCampaign> ResolveHttp(const Campaign& campaign, ResolvedCampaign r) {
  if (!r.campaign.http) return r;
  HttpBackendSettings& hs = *r.campaign.http;
  if (hs.spec.tokenizer.empty()) {
    if (r.model_dir.empty()) {
      return Status::InvalidArgument(
          Located(campaign, hs.where, "tokenizer: required when the campaign has no model"));
    }
    hs.spec.tokenizer = (r.model_dir / "tokenizer.json").string();
  }
  const std::string what =
      hs.tokenizer_where.path == hs.where.path ? "tokenizer (the model's) " : "";
  auto digest = Sha256File(hs.spec.tokenizer);
  if (!digest.ok()) {
    return Status(digest.status().code(),
                  Located(campaign, hs.tokenizer_where, what + digest.status().message()));
  }
  auto tokenizer = Tokenizer::Load(hs.spec.tokenizer);
  if (!tokenizer.ok()) {
    return Status(tokenizer.status().code(),
                  Located(campaign, hs.tokenizer_where, what + tokenizer.status().message()));
  }
  hs.spec.tokenizer_digest = *digest;
  return r;
}

}  // namespace

Result<ResolvedCampaign> ResolveCampaign(const Campaign& campaign, const ResolveOptions& options) {
  namespace fs = std::filesystem;
  ResolvedCampaign r;
  r.campaign = campaign;

  // The job limit: --max-jobs, then the campaign's max_jobs, then the default.
  SourceLocation limit_where;
  std::string limit_origin;
  if (options.max_jobs) {
    r.max_jobs = *options.max_jobs;
    limit_origin = "--max-jobs";
  } else if (campaign.max_jobs) {
    r.max_jobs = *campaign.max_jobs;
    limit_where = campaign.max_jobs_where;
    limit_origin = "max_jobs";
  } else {
    r.max_jobs = options.default_max_jobs;
    limit_origin = "the default limit";
  }
  if (r.max_jobs < 1 || r.max_jobs > kMaxJobsCeiling) {
    return Status::InvalidArgument("job limit " + std::to_string(r.max_jobs) + " (" + limit_origin +
                                   ") must be in [1, " + std::to_string(kMaxJobsCeiling) + "]");
  }
  const int64_t jobs = campaign.job_count();
  if (jobs > r.max_jobs) {
    const SourceLocation& where = limit_where.line > 0 ? limit_where : campaign.matrix_where;
    return Status::InvalidArgument(Located(
        campaign, where,
        "the campaign expands to " + std::to_string(jobs) + " jobs (" +
            std::to_string(campaign.cells.size()) + " cells x " +
            std::to_string(campaign.trial_seeds.size()) + " trials), more than the limit of " +
            std::to_string(r.max_jobs) + " (" + limit_origin +
            "); narrow the matrix, or raise the limit with max_jobs in the campaign or "
            "--max-jobs"));
  }

  // The model: files and digest, then the config. A campaign without a model runs only on
  // http (ParseCampaignText checked), and has no model to locate.
  const bool has_model = options.model_dir || !campaign.model.empty();
  if (!has_model) return ResolveHttp(campaign, std::move(r));
  fs::path dir = options.model_dir ? *options.model_dir : campaign.model_dir;
  std::error_code ec;
  dir = fs::absolute(dir, ec).lexically_normal();
  if (ec) return Status::IoError("cannot make " + dir.string() + " absolute: " + ec.message());
  const SourceLocation model_where =
      options.model_dir ? SourceLocation{0, 0, "--model"} : campaign.model_where;
  auto files = LocateModel(dir);
  if (!files.ok()) {
    return Status(files.status().code(), Located(campaign, model_where, files.status().message()));
  }
  auto config = LoadModelConfig(files->config);
  if (!config.ok()) {
    return Status(config.status().code(),
                  Located(campaign, model_where, config.status().message()));
  }
  r.model_dir = dir;
  r.model_digest = files->digest;
  r.model_config = *config;

  // Context lengths the cells use must fit the model.
  const int mpe = r.model_config.max_position_embeddings;
  if (mpe > 0) {
    const AxisValues& lengths = campaign.values[Ix(Axis::kContextLength)];
    std::vector<char> used(lengths.size(), 0);
    for (const Cell& cell : campaign.cells) {
      if (campaign.value(cell, Axis::kBackend).name() == "http") continue;  // the server's call
      used[cell.index[Ix(Axis::kContextLength)]] = 1;
    }
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (!used[i] || lengths[i].integer() <= mpe) continue;
      return Status::InvalidArgument(
          Located(campaign, lengths[i].where,
                  "context_length " + lengths[i].ToString() +
                      " is longer than the model's max_position_embeddings (" +
                      std::to_string(mpe) + ", " + files->config.string() + ")"));
    }
  }
  // Probes read the indexers: a model without one (no compress ratio 4) has no layer to probe.
  if (r.model_config.num_indexer_layers() == 0) {
    for (const Cell& cell : campaign.cells) {
      if (!cell.probe || campaign.value(cell, Axis::kBackend).name() == "http") continue;
      return Status::InvalidArgument(
          Located(campaign, model_where,
                  "probe: the model has no layer with an indexer to probe (compress_ratios has "
                  "no 4; " +
                      files->config.string() + "); set probe: false"));
    }
  }
  return ResolveHttp(campaign, std::move(r));
}

Result<std::vector<JobSpec>> ExpandCampaign(const ResolvedCampaign& resolved) {
  const Campaign& c = resolved.campaign;
  if (c.job_count() > resolved.max_jobs) {
    return Status::InvalidArgument(
        Located(c, {},
                "the campaign expands to " + std::to_string(c.job_count()) +
                    " jobs, more than the limit of " + std::to_string(resolved.max_jobs)));
  }
  const bool unresolved =
      (resolved.model_dir.empty() ? !c.model.empty() : resolved.model_digest.empty()) ||
      (c.http && c.http->spec.tokenizer_digest.empty());
  if (unresolved) {
    return Status::FailedPrecondition(c.source_name +
                                      ": the campaign is not resolved (no model "
                                      "digest); call ResolveCampaign first");
  }
  std::vector<JobSpec> jobs;
  jobs.reserve(static_cast<size_t>(c.job_count()));
  const JobCheckOptions checks = DefaultJobCheckOptions();
  for (const Cell& cell : c.cells) {
    JobSpec base;
    base.model_dir = resolved.model_dir.string();
    base.model_digest = resolved.model_digest;
    base.engine_version = kEngineVersion;
    base.task = c.value(cell, Axis::kTask).name();
    base.haystack = c.value(cell, Axis::kHaystack).name();
    base.backend = c.value(cell, Axis::kBackend).name();
    if (base.backend == "http") {
      if (!c.http) {
        return Status::Internal(c.source_name +
                                ": a cell runs on http but the campaign has no "
                                "http settings");
      }
      base.http = c.http->spec;
    }
    const std::string& precision = c.value(cell, Axis::kPrecision).name();
    auto profile = c.precisions.find(precision);
    if (profile == c.precisions.end()) {
      return Status::Internal(c.source_name + ": precision profile '" + precision +
                              "' is used by a cell but was not resolved");
    }
    base.precision = profile->second;
    base.fault = c.value(cell, Axis::kFault).name();
    base.topk = static_cast<int>(c.value(cell, Axis::kTopk).integer());
    base.context_length = c.value(cell, Axis::kContextLength).integer();
    base.needle_position = c.value(cell, Axis::kNeedlePosition).number();
    base.max_new_tokens = cell.max_new_tokens;
    base.probe = cell.probe;
    for (size_t t = 0; t < c.trial_seeds.size(); ++t) {
      JobSpec job = base;
      job.seed = c.trial_seeds[t];
      job.trial = static_cast<int>(t);
      // The check the daemon applies to a submitted job: what validates here is accepted there.
      if (Status ok = CheckJobSpec(job, checks); !ok.ok()) {
        return Status::InvalidArgument(
            Located(c, {}, "job " + std::to_string(jobs.size()) + ": " + ok.message()));
      }
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

std::string CampaignFingerprint(const std::vector<JobSpec>& jobs) {
  std::vector<std::string> keys;
  keys.reserve(jobs.size());
  for (const JobSpec& j : jobs) keys.push_back(j.Key());
  std::sort(keys.begin(), keys.end());
  Sha256 h;
  h.Update("nw-campaign-fingerprint/v1\n");
  for (const std::string& k : keys) {
    h.Update(k);
    h.Update("\n");
  }
  return h.HexDigest();
}

}  // namespace nw
