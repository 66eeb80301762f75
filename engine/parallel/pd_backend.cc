#include "engine/parallel/pd_backend.h"

#include <utility>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/sequence.h"
#include "engine/parallel/pd_generate.h"

namespace nw::parallel {

PdBackend::PdBackend(const BackendInfo& info, std::shared_ptr<const ModelConfig> config,
                     std::shared_ptr<const ModelWeights> weights)
    : info_(info), config_(std::move(config)), weights_(std::move(weights)) {}

Result<std::unique_ptr<PdBackend>> PdBackend::Create(const BackendInfo& info,
                                                     const ModelConfig& config,
                                                     std::shared_ptr<const ModelWeights> weights) {
  if (info.device != DeviceKind::kCpu || !info.disaggregated) {
    return Status::InvalidArgument("backend '" + std::string(info.name) +
                                   "' is not the CPU prefill/decode backend (cpu-pd)");
  }
  if (weights == nullptr) return Status::InvalidArgument("no weights");
  NW_RETURN_IF_ERROR(config.Validate());
  NW_RETURN_IF_ERROR(cpu::ValidateWeights(config, *weights));
  return std::unique_ptr<PdBackend>(
      new PdBackend(info, std::make_shared<const ModelConfig>(config), std::move(weights)));
}

Result<std::unique_ptr<BackendSequence>> PdBackend::NewSequence(const SequenceSpec& spec) {
  NW_RETURN_IF_ERROR(spec.precision.Validate());
  NW_RETURN_IF_ERROR(CheckBackendFault(info_, spec.fault));
  NW_ASSIGN_OR_RETURN(std::unique_ptr<PdSequence> seq,
                      PdSequence::Create(config_, weights_.Get(spec.precision.weights), spec));
  return std::unique_ptr<BackendSequence>(std::move(seq));
}

int64_t PdBackend::state_bytes_per_token(const PrecisionProfile& precision) const {
  (void)precision;  // both instances store fp32
  return cpu::CpuStateBytesPerToken(*config_);
}

std::optional<Result<GenerateResult>> PdBackend::GenerateWhole(const GenerateRequest& request) {
  if (Status s = request.precision.Validate(); !s.ok()) return Result<GenerateResult>(s);
  if (Status s = CheckBackendFault(info_, request.fault); !s.ok()) return Result<GenerateResult>(s);
  return GeneratePd(config_, weights_.Get(request.precision.weights), request);
}

}  // namespace nw::parallel
