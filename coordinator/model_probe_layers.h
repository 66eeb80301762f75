// The layers a job's model can probe, read from the config.json in the job's model folder when
// the coordinator can see it (always for `nw run`; for the daemon when it shares the workers'
// file system), so a result whose probes name layers the model does not have (or layers without
// an indexer) is refused (protocol/job.h, CheckResultBounds). Read once per model digest.
// Thread-safety: one thread (the coordinator's loop).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "protocol/job.h"

namespace nw {

class ModelProbeLayersCache {
 public:
  /// The probe layers of `spec`'s model, or null when they are not known here: an http job (the
  /// server's model), or a model folder whose config.json cannot be read from this process.
  const ModelProbeLayers* For(const JobSpec& spec);

 private:
  std::map<std::string, std::optional<ModelProbeLayers>> by_digest_;
};

}  // namespace nw
