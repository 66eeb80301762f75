// Test support for GPU busy (worker/gpu_busy_sampler.h): a utilization source that stands in
// for NVML, an executor that answers every job, and a job spec for a given backend. Header
// only; the tests that include it link nw_worker.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "protocol/job.h"
#include "worker/executor.h"
#include "worker/gpu_utilization.h"

namespace nw::test_support {

// Every read gives one new sample, `busy`, one microsecond after the last: any two marks of a
// sampler have samples between them, all worth `busy`, whichever thread reads first.
class SteadySource final : public GpuUtilizationSource {
 public:
  explicit SteadySource(double busy) : busy_(busy) {}
  Result<std::vector<UtilizationSample>> SamplesSince(uint64_t since_us) override {
    const uint64_t t = ++now_;
    if (t <= since_us) return std::vector<UtilizationSample>{};
    return std::vector<UtilizationSample>{{t, busy_}};
  }
  std::string Name() const override { return "fake GPU"; }

 private:
  double busy_;
  std::atomic<uint64_t> now_{0};
};

// Answers every job with a pass that took 10 ms, advertising one backend.
class AnswerExecutor final : public JobExecutor {
 public:
  explicit AnswerExecutor(std::string backend) : backend_(std::move(backend)) {}
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override {
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    r.outcome = Outcome::kPass;
    r.expected = "x";
    r.generated_text = "x";
    r.device = backend_;
    r.engine_version = spec.engine_version;
    r.total_ms = 10;
    return r;
  }
  nlohmann::json Capabilities() const override {
    return nlohmann::json{{"backends", {backend_}}, {"device", backend_}};
  }

 private:
  std::string backend_;
};

inline JobSpec BusySpec(int trial, const std::string& backend, int64_t context_length = 256) {
  JobSpec s;
  s.model_dir = "/models/tiny";
  s.model_digest = "digest";
  s.engine_version = "nw-test";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = context_length;
  s.needle_position = 0.5;
  s.topk = 8;
  s.backend = backend;
  s.seed = 7;
  s.trial = trial;
  return s;
}

}  // namespace nw::test_support
