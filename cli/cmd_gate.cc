// nw gate --baseline A --candidate B: the release gate (report/gate.h, docs/gating.md).
// A is a named baseline (nw baseline set) or else a campaign; B is a campaign or else a named
// baseline. Prints the verdict as text, Markdown or JSON; --junit FILE and --summary FILE write
// JUnit XML and Markdown for CI systems. --rerun K reruns the candidate jobs behind regressed
// cells K times on local CPU workers (the embedded coordinator of `nw run`) and records flaky
// verdicts; that writes results to the database, so the gate then opens it read-write.
// Exit codes: 0 pass; 1 regression; 2 not enough evidence (nothing testable, or --strict with
// insufficient cells); 4 bad input (kGateBadInput).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/clock.h"
#include "compose/embedded_run.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/db_lock.h"
#include "db/store.h"
#include "report/gate.h"
#include "worker/engine_executor.h"

namespace nw::cli {
namespace {

// 0, 1 and 2 are the gate's decisions (GateReport::exit_code); bad input is kept apart from them.
constexpr int kGateBadInput = 4;

struct GateArgs {
  std::string baseline;
  std::string candidate;
  double tolerance = 0.05;
  int64_t min_trials = 10;
  double alpha = 0.05;
  std::string by = "length";
  bool strict = false;
  std::string format = "text";
  std::string junit;
  std::string summary;
  int rerun = 0;
  int workers = 2;
  std::optional<double> pass_rate;   // else the candidate campaign's criterion
  std::optional<double> confidence;  // else the candidate campaign's criterion
};

struct Side {
  std::vector<CampaignSample> samples;
  std::string source;      // "baseline NAME (campaign C)" or "campaign C"
  bool shadowing = false;  // the name is both a baseline's and a campaign's
  Criterion criterion;     // the criterion its campaign states (defaults when none, or not found)
};

Result<Criterion> CriterionOf(Store& store, const std::string& campaign) {
  NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> c, store.FindCampaign(campaign));
  if (!c || c->source_text.empty()) return Criterion{};
  return ParseCampaignCriterion(c->source_text, c->source_path.empty() ? campaign : c->source_path);
}

Result<Side> LoadSide(Store& store, const std::string& name, bool baseline_first) {
  Side side;
  auto try_baseline = [&]() -> Result<bool> {
    NW_ASSIGN_OR_RETURN(std::optional<BaselineRecord> b, store.FindBaseline(name));
    if (!b) return false;
    NW_ASSIGN_OR_RETURN(side.samples, store.BaselineSamples(name, false));
    side.source = "baseline " + name + " (campaign " + b->campaign_name + ")";
    NW_ASSIGN_OR_RETURN(side.criterion, CriterionOf(store, b->campaign_name));
    return true;
  };
  auto try_campaign = [&]() -> Result<bool> {
    NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> c, store.FindCampaign(name));
    if (!c) return false;
    NW_ASSIGN_OR_RETURN(side.samples, store.CampaignSamples(c->id, false));
    side.source = "campaign " + name;
    NW_ASSIGN_OR_RETURN(side.criterion, CriterionOf(store, name));
    return true;
  };
  bool found = false;
  const Status st = store.InReadTransaction([&]() -> Status {
    NW_ASSIGN_OR_RETURN(found, baseline_first ? try_baseline() : try_campaign());
    if (!found) {
      NW_ASSIGN_OR_RETURN(found, baseline_first ? try_campaign() : try_baseline());
      return Status::Ok();
    }
    // Never shadow silently: a name that is both (a baseline set before `baseline set` refused
    // campaign names, or a campaign run after its baseline) says which one was read.
    NW_ASSIGN_OR_RETURN(std::optional<BaselineRecord> b, store.FindBaseline(name));
    NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> c, store.FindCampaign(name));
    if (b && c) {
      side.source +=
          baseline_first
              ? " (a campaign is also named '" + name + "'; --baseline reads the baseline first)"
              : " (a baseline is also named '" + name + "'; --candidate reads the campaign first)";
      side.shadowing = true;
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!found) {
    return Status::NotFound("no baseline or campaign named '" + name + "' in " +
                            store.path().string());
  }
  return side;
}

// Reruns jobs on local CPU workers through the embedded coordinator, as `nw run --rerun` would:
// the jobs are linked to a campaign "<candidate>.gate-rerun", requeued and run; each new result
// is the one the run committed (a result id the job did not have before).
class EmbeddedRerunner final : public report::Rerunner {
 public:
  EmbeddedRerunner(Store& store, std::string campaign, int workers, bool quiet)
      : store_(store), campaign_(std::move(campaign)), workers_(workers), quiet_(quiet) {}

  Result<std::map<std::string, std::pair<int64_t, JobResult>>> RunOnce(
      const std::vector<JobSpec>& jobs) override {
    NW_ASSIGN_OR_RETURN(
        int64_t id, store_.UpsertCampaign(campaign_, "", "jobs rerun by nw gate", clock_.WallMs()));
    NW_RETURN_IF_ERROR(store_.SetCampaignJobs(id, jobs, clock_.WallMs()));
    std::map<std::string, int64_t> before;
    {
      NW_ASSIGN_OR_RETURN(auto samples, store_.CampaignSamples(id, false));
      for (const CampaignSample& s : samples) before[s.job.key] = s.result_id;
    }
    std::vector<std::string> keys;
    for (const JobSpec& s : jobs) keys.push_back(s.Key());
    NW_RETURN_IF_ERROR(store_.RequeueJobs(keys, clock_.WallMs()));
    std::vector<std::unique_ptr<JobExecutor>> executors;
    for (int i = 0; i < workers_; ++i) {
      EngineExecutorOptions eo;
      eo.worker_id = "gate-rerun-" + std::to_string(i);
      executors.push_back(std::make_unique<EngineExecutor>(eo));
    }
    RunOptions ro;
    ro.worker_prefix = "gate-rerun";
    NW_ASSIGN_OR_RETURN(RunSummary summary, RunEmbedded(store_, id, std::move(executors), ro));
    if (summary.skipped > 0) {
      return Status::Unsupported(std::to_string(summary.skipped) +
                                 " rerun jobs need a backend no local CPU worker has");
    }
    if (!quiet_) {
      std::cerr << "gate: reran " << jobs.size() << " jobs (" << summary.committed << " results, "
                << summary.failed_now << " failed)\n";
    }
    std::map<std::string, std::pair<int64_t, JobResult>> out;
    NW_ASSIGN_OR_RETURN(auto samples, store_.CampaignSamples(id, false));
    for (CampaignSample& s : samples) {
      if (!s.result || s.result_id == before[s.job.key]) continue;
      out[s.job.key] = {s.result_id, std::move(*s.result)};
    }
    return out;
  }

 private:
  Store& store_;
  std::string campaign_;
  int workers_;
  bool quiet_;
  SystemClock clock_;
};

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IoError(path + ": cannot open for writing");
  out << text;
  out.close();
  if (!out) return Status::IoError(path + ": write failed");
  return Status::Ok();
}

Result<int> RunGateCommand(const Globals& g, const GateArgs& a) {
  report::GateOptions o;
  o.tolerance = a.tolerance;
  o.min_trials = a.min_trials;
  o.alpha = a.alpha;
  o.strict = a.strict;
  NW_ASSIGN_OR_RETURN(o.by, report::ParseGateGranularity(a.by));
  NW_RETURN_IF_ERROR(o.Validate());
  if (a.format != "text" && a.format != "markdown" && a.format != "md" && a.format != "json") {
    return Status::InvalidArgument("--format must be text, markdown or json, not '" + a.format +
                                   "'");
  }
  if (a.rerun < 0) return Status::InvalidArgument("--rerun must be >= 0");
  if (a.rerun > 0 && a.workers < 1) return Status::InvalidArgument("--workers must be >= 1");
  if (!std::filesystem::exists(g.db_path)) {
    return Status::NotFound("no database at " + g.db_path + " (run a campaign first, or --db)");
  }
  // Reruns write jobs and results like `nw run`: not while a daemon or a run owns the database.
  std::unique_ptr<DbWriterLock> writer_lock;
  if (a.rerun > 0) {
    auto lock = DbWriterLock::Acquire(g.db_path, DbWriterRole::kGate);
    if (!lock.ok()) {
      return Status::FailedPrecondition("--rerun needs to write to " + g.db_path + ": " +
                                        lock.status().message() +
                                        "; gate without --rerun (read-only) or wait for it");
    }
    writer_lock = std::move(lock).value();
  }
  const Store::Mode mode = a.rerun > 0 ? Store::Mode::kReadWrite : Store::Mode::kReadOnly;
  NW_ASSIGN_OR_RETURN(auto store, Store::Open(g.db_path, mode));
  NW_ASSIGN_OR_RETURN(Side base, LoadSide(*store, a.baseline, /*baseline_first=*/true));
  NW_ASSIGN_OR_RETURN(Side cand, LoadSide(*store, a.candidate, /*baseline_first=*/false));
  for (const Side* side : {&base, &cand}) {
    if (side->shadowing) std::cerr << "nw gate: note: " << side->source << "\n";
  }
  // The boundary verdicts: the candidate campaign's criterion, unless the flags say otherwise.
  o.criterion = cand.criterion;
  if (a.pass_rate) o.criterion.pass_rate = *a.pass_rate;
  if (a.confidence) o.criterion.confidence = *a.confidence;
  NW_RETURN_IF_ERROR(o.Validate());
  report::GateReport r;
  if (a.rerun > 0) {
    SystemClock clock;
    EmbeddedRerunner rerunner(*store, a.candidate + ".gate-rerun", a.workers, g.quiet);
    NW_ASSIGN_OR_RETURN(
        r, report::RunGateWithReruns(base.samples, cand.samples, o, a.rerun, rerunner, *store,
                                     a.baseline + " -> " + a.candidate, clock.WallMs()));
  } else {
    NW_ASSIGN_OR_RETURN(r, report::RunGate(base.samples, cand.samples, o));
  }
  r.baseline_name = a.baseline;
  r.baseline_source = base.source;
  r.candidate_name = a.candidate;
  if (a.format == "text") {
    std::cout << report::RenderGateText(r);
  } else if (a.format == "json") {
    std::cout << report::RenderGateJson(r).dump(2) << "\n";
  } else {
    std::cout << report::RenderGateMarkdown(r);
  }
  if (!a.junit.empty()) NW_RETURN_IF_ERROR(WriteFile(a.junit, report::RenderGateJUnit(r)));
  if (!a.summary.empty()) NW_RETURN_IF_ERROR(WriteFile(a.summary, report::RenderGateMarkdown(r)));
  return r.exit_code;
}

}  // namespace

void RegisterGate(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("gate",
                                 "Release gate: did the candidate lose retrieval the baseline had? "
                                 "(exit 0 pass, 1 regression, 2 not enough evidence, 4 bad input)");
  auto a = std::make_shared<GateArgs>();
  cmd->add_option("--baseline", a->baseline, "Named baseline (or campaign)")->required();
  cmd->add_option("--candidate", a->candidate, "Campaign (or named baseline)")->required();
  cmd->add_option("--tolerance", a->tolerance, "Smallest drop in pass rate that fails")
      ->capture_default_str();
  cmd->add_option("--min-trials", a->min_trials, "Answers (pairs) a cell needs to be tested")
      ->capture_default_str();
  cmd->add_option("--alpha", a->alpha, "One-sided family-wise level (Holm)")->capture_default_str();
  cmd->add_option("--by", a->by, "Cells: length, cell (length x position) or config")
      ->capture_default_str();
  cmd->add_flag("--strict", a->strict, "Insufficient cells fail the gate (exit 2)");
  cmd->add_option("--pass-rate", a->pass_rate,
                  "Boundary verdict threshold (default: the candidate campaign's criterion, "
                  "else 0.9)");
  cmd->add_option("--confidence", a->confidence,
                  "Boundary verdict confidence (default: the candidate campaign's criterion, "
                  "else 0.95)");
  cmd->add_option("--format", a->format, "text, markdown or json")->capture_default_str();
  cmd->add_option("--junit", a->junit, "Also write JUnit XML to this file");
  cmd->add_option("--summary", a->summary, "Also write the Markdown summary to this file");
  cmd->add_option("--rerun", a->rerun,
                  "Rerun the candidate jobs of regressed cells K times on local CPU workers and "
                  "record flaky verdicts")
      ->capture_default_str();
  cmd->add_option("--workers", a->workers, "Local workers for --rerun")->capture_default_str();
  cmd->callback([a, &g] {
    auto code = RunGateCommand(g, *a);
    if (!code.ok()) {
      std::cerr << "nw gate: " << code.status().ToString() << "\n";
      g.exit_code = kGateBadInput;
      return;
    }
    g.exit_code = *code;
  });
}

}  // namespace nw::cli
