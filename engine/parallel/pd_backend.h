// "cpu-pd" behind the seam (engine/backend.h): a Backend whose requests run whole through
// GeneratePd (pd_generate.h: prefill instance -> decode-state transfer -> paged decode
// instance), with timing split as a PD deployment sees it. Step-by-step callers (`nw serve`) get
// PdSequences: prefill on the prefill instance, the transfer at the first decode step.
// Thread-safety: as backend.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/types.h"
#include "engine/weight_cache.h"

namespace nw::parallel {

class PdBackend final : public Backend {
 public:
  /// `info` must be the catalog's disaggregated CPU entry ("cpu-pd"). Checks the config and the
  /// weights against it.
  static Result<std::unique_ptr<PdBackend>> Create(const BackendInfo& info,
                                                   const ModelConfig& config,
                                                   std::shared_ptr<const ModelWeights> weights);

  const BackendInfo& info() const override { return info_; }
  const ModelConfig& config() const override { return *config_; }
  std::string device() const override { return "cpu"; }
  Result<std::unique_ptr<BackendSequence>> NewSequence(const SequenceSpec& spec) override;
  int64_t state_bytes_per_token(const PrecisionProfile& precision) const override;
  std::optional<Result<GenerateResult>> GenerateWhole(const GenerateRequest& request) override;

 private:
  PdBackend(const BackendInfo& info, std::shared_ptr<const ModelConfig> config,
            std::shared_ptr<const ModelWeights> weights);

  const BackendInfo& info_;
  std::shared_ptr<const ModelConfig> config_;
  WeightCache weights_;
};

}  // namespace nw::parallel
