// EngineExecutor: the real JobExecutor. For each job it loads (or reuses) the engine for the
// job's model and backend, builds the NIAH prompt from the job's own seed, generates greedily,
// scores the answer and summarizes the indexer probes.
// Thread-safety: one executor per worker slot; it owns its engines.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "worker/executor.h"

namespace nw {

struct EngineExecutorOptions {
  std::string worker_id = "worker";
  std::vector<std::string> backends;  // what this worker advertises (default: AvailableBackends)
  int max_loaded_engines = 2;         // engines kept loaded (model x backend), least recent evicted
  int gpu = -1;  // CUDA device the cuda* backends run on (set on the calling thread before each
                 // job); -1 = the thread's current device
};

class EngineExecutor final : public JobExecutor {
 public:
  explicit EngineExecutor(EngineExecutorOptions options);
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override;
  nlohmann::json Capabilities() const override;

 private:
  Result<Engine*> EngineFor(const JobSpec& spec);
  Result<JobResult> Run(const JobSpec& spec, const std::string& key, int attempt);
  // The device of the job's engine (Engine::device()) if loaded, else its catalog device kind.
  std::string DeviceFor(const JobSpec& spec) const;

  EngineExecutorOptions options_;
  // (model_dir, backend) -> engine, with a use counter for eviction.
  std::map<std::pair<std::string, std::string>, std::pair<std::unique_ptr<Engine>, int64_t>>
      engines_;
  int64_t use_counter_ = 0;
};

/// Summarizes one engine probe into the compact form stored in the database.
ProbeSummary SummarizeProbe(const IndexerProbe& probe, int64_t last_prompt_position);

}  // namespace nw
