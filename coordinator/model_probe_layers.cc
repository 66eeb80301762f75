#include "coordinator/model_probe_layers.h"

#include <filesystem>

#include "engine/checkpoint/config.h"

namespace nw {

const ModelProbeLayers* ModelProbeLayersCache::For(const JobSpec& spec) {
  if (spec.backend == "http" || spec.model_dir.empty() || spec.model_digest.empty()) {
    return nullptr;
  }
  auto it = by_digest_.find(spec.model_digest);
  if (it == by_digest_.end()) {
    std::optional<ModelProbeLayers> layers;
    std::error_code ec;
    const std::filesystem::path file = std::filesystem::path(spec.model_dir) / "config.json";
    if (std::filesystem::is_regular_file(file, ec)) {
      if (Result<ModelConfig> cfg = LoadModelConfig(file); cfg.ok()) {
        layers.emplace();
        layers->n_layers = cfg->n_layers;
        for (int l = 0; l < cfg->n_layers; ++l) {
          if (cfg->has_indexer(l)) layers->indexer_layers.push_back(l);
        }
      }
    }
    it = by_digest_.emplace(spec.model_digest, std::move(layers)).first;
  }
  return it->second ? &*it->second : nullptr;
}

}  // namespace nw
