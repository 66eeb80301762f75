#include "engine/cpu/cpu_backend.h"

#include <cmath>
#include <utility>

#include "engine/cpu/batch.h"

namespace nw::cpu {

SequenceOptions SequenceOptionsFor(const BackendInfo& info, const SequenceSpec& spec) {
  SequenceOptions so;
  so.layout = info.layout;
  so.prefill_chunk = info.prefill_chunk;
  so.index_topk = spec.index_topk;
  so.precision = spec.precision;
  so.probe = spec.probe;
  so.fault = spec.fault;
  so.trace = spec.trace;
  so.max_tokens = spec.max_tokens;
  so.memory_limit_bytes = spec.memory_limit_bytes;
  return so;
}

int64_t CpuStateBytesPerToken(const ModelConfig& cfg) {
  constexpr double kBytes = 4;  // the CPU simulation stores every value as fp32
  double bytes = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int ratio = cfg.ratio(l);
    if (ratio <= 0) continue;
    bytes += kBytes * cfg.head_dim / ratio;
    if (ratio == 4) bytes += kBytes * cfg.index_head_dim / 4;
  }
  return static_cast<int64_t>(std::ceil(bytes));
}

CpuSequence::CpuSequence(std::shared_ptr<const ModelConfig> config,
                         std::shared_ptr<const ModelWeights> weights, Sequence seq)
    : config_(std::move(config)), weights_(std::move(weights)), seq_(std::move(seq)) {}

Status CpuSequence::Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) {
  return seq_.Prefill(tokens, logits);
}

Status CpuSequence::Decode(int32_t token, std::vector<float>* logits) {
  return seq_.Decode(token, logits);
}

Status CpuSequence::Extend(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  if (tokens.empty()) return Status::InvalidArgument("extend needs at least one token");
  return seq_.Forward(tokens, nullptr, all_logits);
}

CpuBackend::CpuBackend(const BackendInfo& info, std::shared_ptr<const ModelConfig> config,
                       std::shared_ptr<const ModelWeights> weights)
    : info_(info), config_(std::move(config)), weights_(std::move(weights)) {}

Result<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    const BackendInfo& info, const ModelConfig& config,
    std::shared_ptr<const ModelWeights> weights) {
  if (info.device != DeviceKind::kCpu || info.disaggregated) {
    return Status::InvalidArgument("backend '" + std::string(info.name) +
                                   "' is not a plain CPU backend (cpu, cpu-paged)");
  }
  if (weights == nullptr) return Status::InvalidArgument("no weights");
  NW_RETURN_IF_ERROR(config.Validate());
  NW_RETURN_IF_ERROR(ValidateWeights(config, *weights));
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(info, std::make_shared<const ModelConfig>(config), std::move(weights)));
}

Result<std::unique_ptr<CpuSequence>> CpuBackend::NewCpuSequence(const SequenceSpec& spec) {
  NW_RETURN_IF_ERROR(spec.precision.Validate());
  NW_RETURN_IF_ERROR(CheckBackendFault(info_, spec.fault));
  std::shared_ptr<const ModelWeights> w = weights_.Get(spec.precision.weights);
  NW_ASSIGN_OR_RETURN(Sequence seq,
                      Sequence::Create(*config_, *w, SequenceOptionsFor(info_, spec)));
  return std::make_unique<CpuSequence>(config_, std::move(w), std::move(seq));
}

Result<std::unique_ptr<BackendSequence>> CpuBackend::NewSequence(const SequenceSpec& spec) {
  NW_ASSIGN_OR_RETURN(std::unique_ptr<CpuSequence> seq, NewCpuSequence(spec));
  return std::unique_ptr<BackendSequence>(std::move(seq));
}

Status CpuBackend::DecodeBatch(std::span<BackendSequence* const> seqs,
                               std::span<const int32_t> tokens, std::vector<float>* logits) {
  std::vector<Sequence*> cpu;
  cpu.reserve(seqs.size());
  for (BackendSequence* s : seqs) {
    auto* c = dynamic_cast<CpuSequence*>(s);
    if (c == nullptr) {
      return Status::InvalidArgument("a decode batch of backend '" + std::string(info_.name) +
                                     "' holds a sequence of another backend");
    }
    cpu.push_back(&c->sequence());
  }
  return cpu::DecodeBatch(cpu, tokens, logits);
}

int64_t CpuBackend::state_bytes_per_token(const PrecisionProfile& precision) const {
  (void)precision;  // stored as fp32 whatever the profile
  return CpuStateBytesPerToken(*config_);
}

}  // namespace nw::cpu
