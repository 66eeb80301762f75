// Test helpers shared by tests/db and tests/report: a temporary database directory and a builder
// that fills a campaign with jobs and results through the public Store API (lease, then commit),
// the way the coordinator does.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "db/store.h"
#include "protocol/job.h"
#include "tests/support/temp_dir.h"

namespace nw::testing_db {

/// A fresh directory under the system temp dir, removed at destruction.
using TempDir = test_support::TempDir;

/// A job spec with test defaults; vary the fields that matter.
inline JobSpec MakeSpec(int64_t length, double position, int trial = 0, int topk = 16,
                        const std::string& backend = "cpu", int64_t seed = 7) {
  JobSpec s;
  s.model_dir = "/models/tiny";
  s.model_digest = "digest-tiny";
  s.engine_version = "test-engine";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = length;
  s.needle_position = position;
  s.topk = topk;
  s.backend = backend;
  s.seed = seed;
  s.trial = trial;
  return s;
}

/// The label v_job_config builds for MakeSpec(..., topk, backend).
inline std::string ConfigLabel(int topk = 16, const std::string& backend = "cpu") {
  return "topk=" + std::to_string(topk) + " precision=fp32 backend=" + backend +
         " task=niah-single haystack=noise";
}

inline JobResult MakeResult(const JobSpec& spec, int attempt, Outcome outcome) {
  JobResult r;
  r.job_key = spec.Key();
  r.attempt = attempt;
  r.outcome = outcome;
  r.generated_text = outcome == Outcome::kPass ? "7281934" : "no idea";
  r.expected = "7281934";
  r.needle_token_offset = spec.context_length / 2;
  r.prompt_hash = "hash-" + r.job_key.substr(0, 8);
  r.prompt_tokens = spec.context_length;
  r.generated_tokens = 5;
  r.prefill_ms = 10.5;
  r.decode_ms = 2.25;
  r.total_ms = 13;
  r.worker_id = "w1";
  r.device = "cpu";
  r.engine_version = spec.engine_version;
  if (outcome == Outcome::kEngineError || outcome == Outcome::kTimeout) {
    r.error_code = outcome == Outcome::kTimeout ? "deadline_exceeded" : "resource_exhausted";
    r.error_message = "simulated";
  }
  return r;
}

/// Builds one campaign: every Cell() job is leased (attempt 1) and answered with the given
/// outcome when Commit() runs; Pending() jobs are only added. The campaign's jobs use the
/// campaign id as seed, so two builders never share (content-addressed) jobs.
class CampaignBuilder {
 public:
  CampaignBuilder(Store& store, const std::string& name) : store_(store) {
    auto id = store_.UpsertCampaign(name, name + ".yaml", "name: " + name + "\n", 1000);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    id_ = id.ok() ? *id : 0;
  }

  int64_t id() const { return id_; }

  /// One job per outcome, trials numbered from 0 within the cell.
  CampaignBuilder& Cell(int64_t length, double position, const std::vector<Outcome>& outcomes,
                        int topk = 16, const std::string& backend = "cpu") {
    int trial = 0;
    for (Outcome o : outcomes) {
      JobSpec s = MakeSpec(length, position, trial++, topk, backend, id_);
      specs_.push_back(s);
      results_.push_back(MakeResult(s, 1, o));
    }
    return *this;
  }

  /// A job that is added but never answered.
  CampaignBuilder& Pending(int64_t length, double position, int trial, int topk = 16,
                           const std::string& backend = "cpu") {
    pending_.push_back(MakeSpec(length, position, trial, topk, backend, id_));
    return *this;
  }

  /// Attaches probes to the most recently added result.
  CampaignBuilder& WithProbes(std::vector<ProbeSummary> probes) {
    results_.back().probes = std::move(probes);
    return *this;
  }

  /// Adds all jobs, leases the answered ones and commits their results.
  void Commit() {
    std::vector<JobSpec> all = specs_;
    all.insert(all.end(), pending_.begin(), pending_.end());
    ASSERT_TRUE(store_.AddJobs(id_, all, 2000).ok());
    for (const JobSpec& s : specs_) {
      Status st = store_.RecordLease(s.Key(), 1, "w1", 9000, 3000);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    Status st = store_.CommitResults(results_, 4000);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

 private:
  Store& store_;
  int64_t id_ = 0;
  std::vector<JobSpec> specs_;
  std::vector<JobSpec> pending_;
  std::vector<JobResult> results_;
};

inline std::vector<Outcome> Repeat(Outcome o, int n) { return std::vector<Outcome>(n, o); }

inline ProbeSummary MakeProbe(int layer, bool in_topk_last, double median_rank, int rank_min = -2) {
  ProbeSummary p;
  p.layer = layer;
  p.positions = 4;
  p.needle_rank_min = rank_min == -2 ? static_cast<int>(median_rank) : rank_min;
  p.needle_rank_median = median_rank;
  p.in_topk_fraction = in_topk_last ? 0.75 : 0.25;
  p.in_topk_last = in_topk_last;
  p.topk = 16;
  p.ranks = {static_cast<int32_t>(median_rank), -1, 3, static_cast<int32_t>(median_rank)};
  p.topk_last = {1, 2, 3};
  return p;
}

}  // namespace nw::testing_db
