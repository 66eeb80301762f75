// Memory a CPU sequence will need, checked before it allocates anything: a request that cannot
// fit is refused with the numbers instead of being killed by the kernel halfway through a
// prefill. The estimate mirrors CudaSequence::CheckFits (engine/cuda/cuda_sequence.h) for the CPU
// backends' fp32 state. Thread-safety: pure functions (HostMemoryLimitBytes reads the process's
// limits).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/types.h"

namespace nw::cpu {

/// Bytes a CPU sequence of `cfg` holds for `max_tokens` positions, fp32 throughout: the RoPE
/// tables, per layer the window ring, the compressed KV and the index keys, the probes' top-k sets
/// when `probe` keeps them, and the per-token activations of one forward chunk (`prefill_chunk`
/// tokens, or the whole sequence when 0). An estimate from above of what Sequence::Create and the
/// first Prefill allocate, not counting the weights (already loaded).
double CpuSequenceBytes(const ModelConfig& cfg, int64_t max_tokens, int64_t prefill_chunk,
                        int index_topk, const ProbeRequest* probe);

/// The memory a CPU sequence may use: `cap_bytes` when positive, else the machine's physical
/// memory (sysconf(_SC_PHYS_PAGES) x page size), lowered to the process's RLIMIT_AS and
/// RLIMIT_DATA when those are set.
int64_t HostMemoryLimitBytes(int64_t cap_bytes);

/// OutOfRange ("a sequence of N tokens needs about X MiB of host memory, which has Y MiB")
/// when CpuSequenceBytes exceeds 90% of `limit_bytes` (the same margin as the GPU check). Not
/// retryable: the same request needs the same memory on the next attempt.
Status CheckCpuSequenceFits(const ModelConfig& cfg, int64_t max_tokens, int64_t prefill_chunk,
                            int index_topk, const ProbeRequest* probe, int64_t limit_bytes);

}  // namespace nw::cpu
