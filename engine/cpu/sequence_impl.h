// Internal to the CPU backend (sequence.cc, batch.cc): a Sequence's state and the forward pass
// over rows of one or more sequences.
//
// ForwardRows runs one chunk of tokens for each of several sequences of one model in a single
// pass: every linear layer runs once over the rows of all of them, while attention, the indexer,
// the compressors and the KV caches stay per sequence. A plain chunk (Sequence::Forward) is the
// case of one sequence. The linears run weight-stationary (LinearRows: each weight row read once
// per block of 16 rows, four rows sharing each load), which computes every output with Linear's
// code and order, so a row's values do not depend on the other rows: batched and alone are
// bit-identical, and so are prompt chunks of any size.
// Thread-safety: as Sequence (one thread; the weights are only read).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/kv_cache.h"
#include "engine/cpu/mhc.h"
#include "engine/cpu/numerics.h"
#include "engine/cpu/sequence.h"
#include "kernels/cpu/rope.h"

namespace nw::cpu {

// Projections (kv and score + ape) of the last span = coff * ratio tokens of one compressor,
// a ring by token position: what the next entries need from earlier chunks.
struct CompressorState {
  int64_t span = 0;
  int64_t width = 0;
  std::vector<float> kv;
  std::vector<float> score;

  CompressorState() = default;
  CompressorState(int64_t s, int64_t w)
      : span(s), width(w), kv(static_cast<size_t>(s * w)), score(static_cast<size_t>(s * w)) {}
  float* kv_row(int64_t pos) { return kv.data() + (pos % span) * width; }
  float* score_row(int64_t pos) { return score.data() + (pos % span) * width; }
};

struct LayerCache {
  RowStore window;      // raw KV ring, window_size slots
  RowStore compressed;  // compressed KV entries (ratio > 0)
  RowStore index_keys;  // indexer keys (ratio 4)
  CompressorState kv_state;
  CompressorState index_state;
};

// One sequence's rows of a layer's attention buffers (n rows each, from its first row on).
struct AttnRows {
  float* qr = nullptr;      // [n, q_lora_rank]
  float* qh = nullptr;      // [n, H * head_dim]
  float* kv = nullptr;      // [n, head_dim]
  float* ckv = nullptr;     // [n, coff * head_dim] compressor projections (ratio > 0)
  float* cscore = nullptr;  // [n, coff * head_dim]
  float* ikv = nullptr;     // [n, 2 * c_I] indexer compressor projections (ratio 4)
  float* iscore = nullptr;  // [n, 2 * c_I]
  float* iq = nullptr;      // [n, h_I * c_I] indexer queries (ratio 4)
  float* iw = nullptr;      // [n, h_I] indexer head weights (ratio 4)
  float* o = nullptr;       // [n, H * head_dim] attention output after the inverse RoPE
};

struct Sequence::Impl {
  const ModelConfig& cfg;
  const ModelWeights& w;
  SequenceOptions opts;
  Numerics num;
  int topk = 0;
  MhcParams mhc;
  RopeTable rope_plain;     // ratio-0 layers: rope_theta, no YaRN
  RopeTable rope_compress;  // ratio > 0 layers and their indexer: compress_rope_theta, YaRN
  ModelConfig moe_cfg;      // cfg, or with the shared expert unclamped (shared-expert-no-clamp)
  std::unique_ptr<PagePool> kv_pool;     // head_dim rows (window + compressed KV)
  std::unique_ptr<PagePool> index_pool;  // index_head_dim rows
  std::vector<LayerCache> layers;
  std::vector<IndexerProbe> probes;
  std::vector<int> probe_slot;  // layer -> index into probes, -1 if not an indexer layer
  int64_t pos = 0;

  Impl(const ModelConfig& c, const ModelWeights& weights, const SequenceOptions& o)
      : cfg(c), w(weights), opts(o) {}

  void Init();
  // One chunk of this sequence alone (ForwardRows with one part).
  Status Forward(std::span<const int32_t> tokens, std::vector<float>* last_logits,
                 std::vector<float>* all_logits);
  // Pools the entries completed by the chunk from its projections (kv, score; ape is added to
  // score here) and the rolling state, and stores them.
  void Compress(const CompressorWeights& cw, bool indexer, const RopeTable& rope, const float* kv,
                float* score, int64_t n, int64_t s, CompressorState& state, RowStore& store);
  // Indexer selection for the token at position p; returns the entries to attend, ascending.
  void SelectEntries(int layer, int64_t p, int64_t key_begin, int64_t visible, const float* iq,
                     const float* iw, std::vector<int32_t>& selected, std::vector<float>& scores,
                     std::vector<int32_t>& topk_out, std::vector<int32_t>& scratch);
  void RecordProbe(int layer, int64_t p, int64_t visible, const float* scores,
                   const int32_t* topk_out, int n_selected);

  // Attention of one layer over this sequence's n rows at positions [s, s + n), in stages
  // between the linears that ForwardRows runs over every sequence's rows:
  //   AttnAfterX: qr, kv and the indexer weights after their projections from x; the
  //               compressors' entries;
  //   AttnAfterQ: the query heads and indexer queries after their projections from qr;
  //   AttnCore:   per token, the sparse attention into r.o (tp_ranks > 1: the whole output into
  //               y, with wo_a/wo_b per rank and the all-reduce);
  //   AttnEnd:    the chunk's raw KV joins the window ring.
  void AttnAfterX(int layer, int64_t n, int64_t s, const AttnRows& r);
  void AttnAfterQ(int layer, int64_t n, int64_t s, const AttnRows& r);
  void AttnCore(int layer, int64_t n, int64_t s, const AttnRows& r, float* y);
  void AttnEnd(int layer, int64_t n, int64_t s, const float* kv);
};

// One sequence's chunk in a ForwardRows pass.
struct RowsPart {
  Sequence::Impl* seq = nullptr;
  std::span<const int32_t> tokens;  // at least one
  float* last_logits = nullptr;     // [V] of the last token, or null
  float* all_logits = nullptr;      // [n, V] of every token, or null
};

// Runs every part's tokens through the model in one pass (see the top of this file). The parts
// must be distinct sequences of one config and one set of weights; a sequence with tp_ranks > 1
// runs alone. Checks every part (capacity, token ids) before changing any sequence.
Status ForwardRows(std::span<const RowsPart> parts);

}  // namespace nw::cpu
