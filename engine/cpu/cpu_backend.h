// The CPU reference backends behind the seam (engine/backend.h). The two plain CPU backends
// differ only in how they run the same math (see sequence.h):
//   "cpu"        contiguous KV, the whole prompt in one pass (ragged prefill);
//   "cpu-paged"  paged KV (pages of 64 entries), prefill in chunks of 256 tokens through the
//                paged cache and the paged indexer, as decode does.
// Both give bit-identical tokens, logits and probes. Cost on tiny config A (one core): a
// 4096-token prefill takes about 1.2 s of CPU, decode about 0.5 ms per token. The one-pass
// prefill keeps per-token activations of one layer for the whole prompt (about 12 KB per token
// for config A), so very long prompts need proportionally more memory than "cpu-paged".
// DecodeBatch runs the step through cpu::DecodeBatch (batch.h): one pass over the weights for the
// whole batch, bit-identical to decoding each sequence alone. "cpu-pd" is in
// engine/parallel/pd_backend.h.
// Thread-safety: as backend.h (one thread at a time); the weight cache is internally locked.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/sequence.h"
#include "engine/types.h"
#include "engine/weight_cache.h"

namespace nw::cpu {

/// The SequenceOptions a CPU catalog entry (its layout and prefill_chunk) gives a spec.
SequenceOptions SequenceOptionsFor(const BackendInfo& info, const SequenceSpec& spec);

/// Bytes of KV / index state one token adds to a CPU sequence of `cfg` (fp32, 4 bytes a value):
/// per layer with ratio > 0, head_dim values per `ratio` tokens of compressed KV, and per
/// ratio-4 layer index_head_dim values per 4 tokens of index keys (the window's raw KV is
/// bounded by window_size, so it adds nothing per token). Rounded up; > 0 for any model with a
/// compressed layer.
int64_t CpuStateBytesPerToken(const ModelConfig& cfg);

/// A cpu::Sequence as a BackendSequence. It holds the config and weights it reads.
class CpuSequence final : public BackendSequence {
 public:
  CpuSequence(std::shared_ptr<const ModelConfig> config,
              std::shared_ptr<const ModelWeights> weights, Sequence seq);

  int64_t position() const override { return seq_.position(); }
  int index_topk() const override { return seq_.index_topk(); }
  Status Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) override;
  Status Decode(int32_t token, std::vector<float>* logits) override;
  Status Extend(std::span<const int32_t> tokens, std::vector<float>* all_logits) override;
  const std::vector<IndexerProbe>& probes() const override { return seq_.probes(); }
  int64_t state_bytes() const override { return seq_.state_bytes(); }

  Sequence& sequence() { return seq_; }
  const Sequence& sequence() const { return seq_; }

 private:
  std::shared_ptr<const ModelConfig> config_;
  std::shared_ptr<const ModelWeights> weights_;
  Sequence seq_;
};

/// "cpu" or "cpu-paged" bound to a model.
class CpuBackend final : public Backend {
 public:
  /// `info` must be a CPU catalog entry that is not disaggregated ("cpu", "cpu-paged"). Checks
  /// the config and the weights against it (errors name the tensor).
  static Result<std::unique_ptr<CpuBackend>> Create(const BackendInfo& info,
                                                    const ModelConfig& config,
                                                    std::shared_ptr<const ModelWeights> weights);

  const BackendInfo& info() const override { return info_; }
  const ModelConfig& config() const override { return *config_; }
  std::string device() const override { return "cpu"; }
  Result<std::unique_ptr<BackendSequence>> NewSequence(const SequenceSpec& spec) override;
  /// Every sequence must be a CpuSequence of this backend; runs cpu::DecodeBatch.
  Status DecodeBatch(std::span<BackendSequence* const> seqs, std::span<const int32_t> tokens,
                     std::vector<float>* logits) override;
  int64_t state_bytes_per_token(const PrecisionProfile& precision) const override;

  /// A cpu::Sequence of this backend's model (weights in spec.precision.weights), wrapped.
  Result<std::unique_ptr<CpuSequence>> NewCpuSequence(const SequenceSpec& spec);

 private:
  CpuBackend(const BackendInfo& info, std::shared_ptr<const ModelConfig> config,
             std::shared_ptr<const ModelWeights> weights);

  const BackendInfo& info_;
  std::shared_ptr<const ModelConfig> config_;
  WeightCache weights_;
};

}  // namespace nw::cpu
