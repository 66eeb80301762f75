// JobExecutor: runs one job and returns its result; the seam between the worker's messaging loop
// and the engine. The real one (EngineExecutor) builds the NIAH prompt, runs the engine and
// scores the answer; tests use fakes. Thread-safety: one executor per worker slot.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "protocol/job.h"

namespace nw {

class JobExecutor {
 public:
  virtual ~JobExecutor() = default;
  /// Runs the job. Never throws: failures come back as a JobResult with an error outcome.
  virtual JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) = 0;
  /// What this executor can run, advertised to the coordinator:
  /// {"backends":["cpu","cpu-paged"],"device":"cpu","models":[...]}
  virtual nlohmann::json Capabilities() const = 0;
};

}  // namespace nw
