// The "cpu-pd" backend: prefill/decode disaggregation run on the CPU reference backend, so that
// campaigns can compare the PD path with "cpu" job for job. One request goes through two
// instances, as in a PD deployment:
//   prefill instance  contiguous KV, the whole prompt in one pass (as "cpu");
//   transfer          the decode state exported and serialized (pd_transfer.h: KV window,
//                     compressed entries, index keys, compressor states), then deserialized and
//                     checked by the receiver;
//   decode instance   a fresh paged-KV Sequence (as "cpu-paged") that imports the state and
//                     decodes greedily.
// The math is the same as "cpu", so tokens, logits and probes are bit-identical to it (tested);
// a difference would mean the transfer lost or altered state. Probe rows are the prefill
// instance's (prompt positions) followed by the decode instance's (decode steps).
// Timing: prefill_ms covers the prefill and the export; decode_ms the import and the decode.
// Thread-safety: pure function of its arguments (the weights are only read).
#pragma once

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/engine.h"

namespace nw::parallel {

inline constexpr const char* kCpuPdBackend = "cpu-pd";

/// Runs `request` on `weights` (already in the request's weight format) through the two
/// instances. Errors: as cpu::Generate, plus any transfer error (named "PD transfer: ...").
Result<GenerateResult> GeneratePd(const ModelConfig& cfg, const ModelWeights& weights,
                                  const GenerateRequest& request);

}  // namespace nw::parallel
