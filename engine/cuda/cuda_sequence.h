// CudaSequence: one request's forward pass on the GPU (the "cuda", "cuda-paged" and "cuda-pd"
// backends). It is engine/cpu/sequence.h's forward pass, step for step and with the same
// precision hooks (engine/cpu/numerics.h), run by the kernels of kernels/cuda on device buffers:
// embedding; per layer hc_pre -> attn_norm -> attention -> hc_post and hc_pre -> ffn_norm -> MoE
// -> hc_post; head collapse -> final norm -> head. Attention: q/kv projections and norms, RoPE
// (YaRN tables uploaded from cpu::RopeTable), both compressors with their rolling state across
// chunks, the indexer (Hadamard, exact fp32 logits, top-k), sparse attention over the window plus
// the selected compressed entries with the sink, inverse RoPE, grouped wo_a, wo_b. MoE: gate,
// hash or biased sqrt-softplus routing, gathered expert products, SwiGLU with the clamp, shared
// expert. Probes (needle rank, in-top-k, k-th score, top-k sets) are computed on the device.
//
// Exactness: every linear layer, RoPE, the Hadamard transform, the indexer logits and top-k
// compute the CPU's bits; RMSNorm's double sum and exp/log (evaluated in double and rounded)
// can differ from the CPU by an ulp, and the sparse attention's fp32 summation order differs, so
// results agree with the CPU to fp32 rounding (the tests state the tolerances) and are bitwise
// identical run to run (no atomics, fixed reduction shapes).
//
// Layouts: contiguous (one buffer per layer for compressed KV and index keys; "cuda") or paged
// (64-row pages from one per-sequence pool, addressed through per-layer page tables, read by the
// paged indexer and the attention through mapped entry ids; "cuda-paged"). The sliding window is
// a ring of window_size rows per layer in both. Stored values are fp32 (already rounded to the
// profile's KV and index-key formats), as in the CPU simulation. Under bf16 activations with KV
// rounded (bf16 or fp8), the compressed KV also keeps a bf16 copy of its rows (exact: they are
// bf16 values), which the attention reads with the window's rows packed to bf16 per chunk.
// Thread-safety: one thread at a time; the DeviceModel must outlive the sequence.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/cpu/sequence.h"
#include "engine/cuda/device_model.h"
#include "engine/cuda/forward_graphs.h"

namespace nw::cuda {

class SequencePool;

class CudaSequence final : public BackendSequence {
 public:
  /// `prefill_chunk` 0 runs the prompt in one pass. Allocates the caches for spec.max_tokens, in
  /// stream order on `stream` (which must outlive the sequence). `rope` (the engine's tables,
  /// at least spec.max_tokens rows) and `model` must outlive it too. With a `pool`, a contiguous
  /// sequence's state goes back to it when the sequence is destroyed, for the next Create of the
  /// same shape (Reuse), and the sequence replays its repeated forwards as CUDA graphs
  /// (forward_graphs.h) when the pool allows them.
  static Result<std::unique_ptr<CudaSequence>> Create(
      const ModelConfig& cfg, const DeviceModel& model, const DeviceRope& rope, KvLayout layout,
      int64_t prefill_chunk, const SequenceSpec& spec, cudaStream_t stream,
      const std::shared_ptr<SequencePool>& pool = nullptr);
  /// A sequence for `spec` made from an idle state of `pool` of the same shape (layout, prefill
  /// chunk, capacity, precision, top-k and fault): its buffers and graphs are kept, the state
  /// starts fresh (position 0). Null when the pool holds none such; idle states of other shapes
  /// are released then, so their memory is free for the sequence the caller creates instead.
  static std::unique_ptr<CudaSequence> Reuse(const std::shared_ptr<SequencePool>& pool,
                                             KvLayout layout, int64_t prefill_chunk,
                                             const SequenceSpec& spec);
  /// Whether a sequence for `spec` fits on the current device, from an estimate of what it will
  /// hold (caches for spec.max_tokens, RoPE tables, one chunk's scratch), checked before anything
  /// is allocated: ResourceExhausted naming the need and the free memory; InvalidArgument for a
  /// bad spec. Create checks it too.
  static Status CheckFits(const ModelConfig& cfg, int64_t prefill_chunk, const SequenceSpec& spec);
  ~CudaSequence() override;

  int64_t position() const override;
  int index_topk() const override;
  Status Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) override;
  Status Decode(int32_t token, std::vector<float>* logits) override;
  Status Extend(std::span<const int32_t> tokens, std::vector<float>* all_logits) override;
  /// Saves what a forward overwrites in place (the window rings and the compressors' rolling
  /// states, on the device) with the position and probe counts; compressed entries and index
  /// keys past the mark need no saving (rewritten when their blocks complete again).
  Status Checkpoint() override;
  Status Rewind() override;
  const std::vector<IndexerProbe>& probes() const override;
  int64_t state_bytes() const override;

  /// Runs `tokens` as one chunk; `last_logits` / `all_logits` ([n, V]) as cpu::Sequence::Forward.
  Status Forward(std::span<const int32_t> tokens, std::vector<float>* last_logits,
                 std::vector<float>* all_logits);

  /// The decode state in the CPU's layout (engine/cpu/sequence.h SequenceState), so the PD
  /// transfer buffer (engine/parallel/pd_transfer.h) carries it unchanged.
  Result<cpu::SequenceState> ExportState() const;
  /// Loads a state into this fresh sequence (sizes checked against the config and capacity).
  Status ImportState(const cpu::SequenceState& state);
  /// Appends probe rows captured elsewhere (the PD prefill instance's) before this one's.
  void PrependProbes(const std::vector<IndexerProbe>& earlier);

  /// Graph replay counters of this sequence's state (accumulated over its reuses).
  ForwardGraphs::Stats graph_stats() const;

  struct Impl;

 private:
  CudaSequence(std::unique_ptr<Impl> impl, std::weak_ptr<SequencePool> pool);
  std::unique_ptr<Impl> impl_;
  std::weak_ptr<SequencePool> pool_;
};

/// Idle sequence states a backend keeps for its next requests (CudaSequence::Reuse): a job of the
/// same shape then allocates nothing and replays the previous jobs' graphs. Holds at most
/// `max_idle` states (the oldest released first). Thread-safety: one thread at a time (the
/// backend's).
class SequencePool {
 public:
  /// `graphs_per_sequence`: graphs each pooled sequence keeps (0: no graphs).
  SequencePool(size_t max_idle, size_t graphs_per_sequence);
  ~SequencePool();
  SequencePool(const SequencePool&) = delete;
  SequencePool& operator=(const SequencePool&) = delete;

  size_t graphs_per_sequence() const { return graphs_per_sequence_; }
  size_t idle() const { return idle_.size(); }
  /// Releases every idle state (stream-ordered frees).
  void Clear();

 private:
  friend class CudaSequence;
  size_t max_idle_;
  size_t graphs_per_sequence_;
  std::vector<std::unique_ptr<CudaSequence::Impl>> idle_;  // oldest first
};

/// Bytes of KV / index state one token adds at this shape (fp32 storage): per compressed layer
/// head_dim floats per `ratio` tokens, per indexer layer index_head_dim floats per 4 tokens; the
/// window ring (window_size rows per layer) and compressor states are a fixed cost on top. Under
/// the profiles that keep a bf16 copy of the compressed KV, that copy adds half its bytes.
int64_t StateBytesPerToken(const ModelConfig& cfg);

}  // namespace nw::cuda
