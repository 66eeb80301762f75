// EngineExecutor: the real JobExecutor. For each job it loads (or reuses) the engine for the
// job's model and backend, builds the NIAH prompt from the job's own seed, generates greedily,
// scores the answer and summarizes the indexer probes.
// Thread-safety: one executor per worker slot; it owns its engines. None of its methods may run
// on two threads at once (Preload() on one thread, then Execute() on another, is fine once the
// first has returned: e.g. a thread joined before the executor is handed to its worker).
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

  /// Loads the engine of (model_dir, backend) into this executor's engines exactly as the first
  /// job on that pair would (selecting options.gpu first for a cuda* backend; the same least
  /// recently used engine is evicted at max_loaded_engines), so that job starts at once. Already
  /// loaded: only marks it used. Errors: the device or the load's, with the model directory
  /// named; nothing is kept then, and a job on the pair loads (and reports) again.
  Status Preload(const std::string& model_dir, const std::string& backend);
  /// Engines loaded now (at most max_loaded_engines).
  size_t loaded_engines() const { return engines_.size(); }

 private:
  // The job's device for a cuda* backend (options_.gpu), on the calling thread.
  Status SelectDevice(const std::string& backend) const;
  Result<Engine*> EngineFor(const std::string& model_dir, const std::string& backend);
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
