// The "cpu-pd" backend's mechanics: prefill/decode disaggregation run on the CPU reference
// backend, so that campaigns can compare the PD path with "cpu" job for job. One request goes
// through two instances, as in a PD deployment:
//   prefill instance  contiguous KV, the whole prompt in one pass (as "cpu");
//   transfer          the decode state exported and serialized (pd_transfer.h: KV window,
//                     compressed entries, index keys, compressor states), then deserialized and
//                     checked by the receiver;
//   decode instance   a fresh paged-KV Sequence (as "cpu-paged") that imports the state and
//                     decodes greedily.
// The math is the same as "cpu", so tokens, logits and probes are bit-identical to it (tested);
// a difference would mean the transfer lost or altered state. Probe rows are the prefill
// instance's (prompt positions) followed by the decode instance's (decode steps).
// The backend itself (engine/parallel/pd_backend.h) runs requests whole through GeneratePd, and
// hands out PdSequences to step-by-step callers (`nw serve`).
// Thread-safety: a PdSequence as a BackendSequence; GeneratePd only reads the weights.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/sequence.h"
#include "engine/types.h"

namespace nw::parallel {

/// One request through the two instances, as a BackendSequence: Prefill runs on the prefill
/// instance until the first Decode, which transfers the state (Export, then Import) and decodes
/// on the decode instance from then on (a later Prefill runs there too).
class PdSequence final : public BackendSequence {
 public:
  static Result<std::unique_ptr<PdSequence>> Create(std::shared_ptr<const ModelConfig> config,
                                                    std::shared_ptr<const ModelWeights> weights,
                                                    const SequenceSpec& spec);

  int64_t position() const override;
  int index_topk() const override { return topk_; }
  Status Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) override;
  Status Decode(int32_t token, std::vector<float>* logits) override;
  const std::vector<IndexerProbe>& probes() const override;
  int64_t state_bytes() const override;

  /// The prefill side: the state as a transfer buffer; the prefill instance is dropped. No-op
  /// once done.
  Status Export();
  /// The decode side: a fresh paged instance loads the transfer buffer (Export first if needed).
  /// Errors are named "PD transfer: ...". No-op once done.
  Status Import();

 private:
  PdSequence() = default;

  std::shared_ptr<const ModelConfig> config_;
  std::shared_ptr<const ModelWeights> weights_;
  cpu::SequenceOptions decode_options_;
  int topk_ = 0;
  Fault fault_ = Fault::kNone;            // the handoff faults act on the transfer (pd_generate.cc)
  int64_t position_ = 0;                  // at Export
  std::optional<cpu::Sequence> prefill_;  // until Export
  std::vector<uint8_t> transfer_;         // between Export and Import
  std::vector<IndexerProbe> prefill_probes_;  // the prefill instance's, kept at Export
  std::optional<cpu::Sequence> decode_;       // from Import
  mutable std::vector<IndexerProbe> merged_;
};

/// Runs `request` on `weights` (already in the request's weight format) through the two
/// instances. Errors: as engine/generate.h Generate, plus any transfer error ("PD transfer: ...").
/// Timing: prefill_ms covers the prefill and the export; decode_ms the import and the decode.
Result<GenerateResult> GeneratePd(std::shared_ptr<const ModelConfig> config,
                                  std::shared_ptr<const ModelWeights> weights,
                                  const GenerateRequest& request);

}  // namespace nw::parallel
