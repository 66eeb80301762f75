// Sequence: one request's forward pass on the CPU reference backend (fp32, single-threaded).
//
// A Sequence owns the request's KV caches (kv_cache.h) and runs tokens through the DeepSeek-V4
// model in chunks. Every chunk, of any length, goes through the same code: the prompt in one pass
// (the "ragged" prefill of the "cpu" backend), in fixed-size chunks (the "cpu-paged" backend), or
// one token at a time (decode). Spec: docs/v4-attention.md §2.
//
// Per chunk of tokens at positions [s, e):
//   embedding, copied to hc_mult residual streams;
//   per layer: hc_pre -> attn_norm -> attention -> hc_post; hc_pre -> ffn_norm -> MoE -> hc_post;
//   head: hc head collapse -> final norm -> head linear -> logits (requested tokens only).
// Attention of one layer over the chunk:
//   1. qr = q_norm(wq_a x); q = wq_b qr as H heads, each RMS-normalised (no weight), RoPE on its
//      last rope_head_dim dims at the token position; kv = kv_norm(wkv x), RoPE likewise.
//   2. Compressors (ratio > 0) emit every entry whose block ends inside the chunk (entries exist
//      once their block is complete), from the chunk's projections and the rolling state of the
//      previous chunks: gated per-channel softmax pooling (ratio 4: 8 tokens through channel
//      halves, previous block A / current block B), RMSNorm, RoPE at position ratio * i. The
//      indexer compressor (ratio 4, width c_I) then applies the orthonormal Hadamard.
//   3. Per token t: the window (raw KV of tokens max(0, t-W+1) .. t, oldest first), then the
//      compressed entries: ratio 128 all visible ones (i < (t+1)/128); ratio 4 the indexer's
//      top-k (k = min(topk, visible); I[t,i] = sum_h w_h ReLU(q_h . K_i), higher score first,
//      ties to the lower index), attended in ascending entry order; ratio 0 none. One softmax
//      over all of them with the per-head sink, scale head_dim^-1/2; inverse RoPE of the output
//      at t; wo_a per group, then wo_b.
// The rope table of a layer is compress_rope_theta with YaRN when its ratio > 0, else rope_theta
// without YaRN; the indexer shares its layer's table. Precision hooks: numerics.h.
//
// Layouts give bit-identical results: every value depends only on its own inputs (row-wise
// linears, per-entry scores, a fixed entry order), never on chunking or addressing.
// Thread-safety: a Sequence is used by one thread; it reads the weights without modifying them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/precision.h"
#include "engine/types.h"

namespace nw::cpu {

struct SequenceOptions {
  KvLayout layout = KvLayout::kContiguous;
  int64_t prefill_chunk = 0;      // tokens per Prefill() chunk; 0 = the whole prompt in one pass
  int index_topk = 0;             // 0 = the config's index_topk
  bool dense_compressed = false;  // ratio-4 layers attend to every visible entry (no indexer
                                  // selection; probes still report the indexer's ranking)
  PrecisionProfile precision;     // activations, index_q, index_k and kv apply here; weights are
                                  // whatever ModelWeights the caller passes
  std::optional<ProbeRequest> probe;
  Fault fault = Fault::kNone;     // known-bug replay (engine/fault.h): the faults a plain sequence
                                  // replays change its forward pass here; the PD handoff faults are
                                  // the PD transfer's (pd_generate.cc)
  ForwardTrace* trace = nullptr;  // per-layer trace sink (types.h), not owned; null: none
  int64_t max_tokens = 0;  // positions the sequence may reach (RoPE tables, buffer reservations)
  // Host memory the sequence may use (memory_check.h); 0 = the machine's physical memory and the
  // process's limits. Create refuses (out_of_range) a sequence that would not fit.
  int64_t memory_limit_bytes = 0;
  // Simulated tensor parallelism (engine/parallel/partition.h): R rank-local computations in one
  // process. Each rank attends with its n_heads/R query heads (and sinks), applies its
  // o_groups/R wo_a groups and its column slice of wo_b; each rank scores its index_n_heads/R
  // indexer heads; each rank runs the selected routed experts of its n_routed_experts/R id range
  // (the shared expert is added once, after the all-reduce). Partial outputs (attention output,
  // index scores before top-k, MoE output) are all-reduced by summing in rank order 0..R-1. 1 = the
  // plain path.
  int tp_ranks = 1;
};

/// Decode state of a request (prefill/decode disaggregation): every value the next Forward reads.
/// Rows are by logical index, so it is independent of the KV layout.
struct SequenceLayerState {
  int ratio = 0;
  std::vector<float> window;       // [min(pos, window_size), head_dim]: positions pos-n .. pos-1
  std::vector<float> compressed;   // [pos / ratio, head_dim] (ratio > 0)
  std::vector<float> index_keys;   // [pos / 4, index_head_dim] (ratio 4)
  std::vector<float> kv_state_kv;  // compressor rolling state, [span, width] rings (ratio > 0)
  std::vector<float> kv_state_score;
  std::vector<float> index_state_kv;  // indexer compressor rolling state (ratio 4)
  std::vector<float> index_state_score;
};
struct SequenceState {
  int64_t position = 0;
  std::vector<SequenceLayerState> layers;
};

/// Checks a decode state against the config and a sequence capacity before anything is written:
/// the position, the layer count and ratios, and every buffer's size (window rows, compressed
/// entries, index keys, both compressors' rolling states). Shared by every backend that imports
/// one (cpu, cpu-paged, the CUDA backends). InvalidArgument or OutOfRange naming the part.
Status CheckSequenceState(const ModelConfig& cfg, const SequenceState& state, int64_t capacity);

class Sequence {
 public:
  /// Checks the weights against the config (every tensor the forward pass reads) and the options.
  /// `cfg` and `weights` must outlive the Sequence.
  static Result<Sequence> Create(const ModelConfig& cfg, const ModelWeights& weights,
                                 const SequenceOptions& options);
  Sequence(Sequence&&) noexcept;
  Sequence& operator=(Sequence&&) noexcept;
  ~Sequence();

  /// Tokens processed so far (the position of the next token).
  int64_t position() const;
  int index_topk() const;

  /// Runs `tokens` in chunks of options.prefill_chunk; `logits` gets the last token's [V] logits.
  Status Prefill(std::span<const int32_t> tokens, std::vector<float>* logits);
  /// Runs one token; `logits` gets its [V] logits.
  Status Decode(int32_t token, std::vector<float>* logits);
  /// Runs `tokens` as one chunk. `last_logits` (optional) gets the last token's [V] logits,
  /// `all_logits` (optional) every token's, [n, V].
  Status Forward(std::span<const int32_t> tokens, std::vector<float>* last_logits,
                 std::vector<float>* all_logits);

  /// Probe rows captured so far, one IndexerProbe per ratio-4 layer (layer order).
  const std::vector<IndexerProbe>& probes() const;

  /// Pages currently held in the request's page pools (paged layout; 0 for contiguous).
  int64_t pages_in_use() const;

  /// Bytes of KV / index / compressor state held now: contiguous buffers as allocated, pool
  /// pages in use, compressor rings (fp32).
  int64_t state_bytes() const;

  /// The request's decode state (KV caches, compressor states, position).
  SequenceState ExportState() const;
  /// Loads a state exported by a Sequence of the same config into this fresh (position 0)
  /// Sequence; every size is checked against the config and capacity. Probes are not carried.
  Status ImportState(const SequenceState& state);

  /// The implementation (sequence_impl.h, internal to the CPU backend): batch.h runs the forward
  /// pass of several sequences at once through it.
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit Sequence(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Checks every tensor the forward pass reads against the config; errors name the tensor.
Status ValidateWeights(const ModelConfig& cfg, const ModelWeights& w);

}  // namespace nw::cpu
