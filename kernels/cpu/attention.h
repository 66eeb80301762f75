// DeepSeek-V4 sparse attention pieces for one query token, CPU reference: the attention over a
// gathered entry list with a per-head sink, the grouped low-rank output projection, and the
// lightning-indexer logits. Spec: docs/v4-attention.md §2.2, §2.4, §2.5.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw::cpu {

struct SparseAttnParams {
  int n_heads = 0;     // H query heads sharing one KV head
  int head_dim = 0;    // d (K = V)
  float scale = 0.0f;  // softmax scale, head_dim^-1/2 in V4
};

/// One query over n gathered KV entries (kv[j] points at head_dim floats, used as key and value):
///   out_h = sum_j e^{z_hj} kv_j / (sum_j e^{z_hj} + e^{sink_h}),   z_hj = scale * (q_h . kv_j).
/// Evaluated in fp32 with the stable shift m_h = max(sink_h, max_j z_hj); the numerator is
/// accumulated over j in the given order and divided once. n = 0 gives out = 0.
/// q, out: [H, d]; sink: [H]; scratch: H * (n + 1) floats.
void SparseAttention(const SparseAttnParams& p, const float* q, const float* const* kv, int64_t n,
                     const float* sink, float* out, float* scratch);

/// Grouped low-rank projection: x is `groups` consecutive slices of group_in values and w is
/// [groups * rank, group_in]; y[g * rank + r] = w[g * rank + r] . x[g * group_in ...].
void GroupedLinear(const float* x, const float* w, int groups, int64_t group_in, int64_t rank,
                   float* y);
/// GroupedLinear of `rows` inputs (x [rows, groups * group_in], y [rows, groups * rank]) with
/// each weight row read once for all inputs; bit-identical to GroupedLinear row by row.
void GroupedLinearRows(const float* x, int64_t rows, const float* w, int groups, int64_t group_in,
                       int64_t rank, float* y);

struct IndexerParams {
  int n_heads = 0;   // h_I
  int head_dim = 0;  // c_I
};

/// Indexer logits of one query against n keys stored contiguously ([n, head_dim]):
///   scores[j] = sum_h w[h] * ReLU(q_h . keys_j)   (heads summed in ascending order).
/// q: [h_I, c_I]; w: [h_I] (already scaled by c_I^-1/2 h_I^-1/2). The paged indexer calls this
/// once per page; every score depends only on its own key, so page splits do not change bits.
void IndexerScores(const IndexerParams& p, const float* q, const float* w, const float* keys,
                   int64_t n, float* scores);

struct CompressParams {
  int ratio = 0;         // r: tokens per block (4 or 128)
  int dim = 0;           // d: entry width
  bool overlap = false;  // ratio 4: pool the previous block (channels A) and the current (B)
};

/// Gated pooling of one compressed entry. The entry sees span = ratio * (overlap ? 2 : 1) token
/// rows k = 0..span-1: with overlap, rows k < ratio are the previous block read through channel
/// half A (columns [0, d)) and rows k >= ratio are the current block through half B (columns
/// [d, 2d)); without overlap the rows are the block itself, columns [0, d). kv[k] and score[k]
/// point at rows of (overlap ? 2 : 1) * d values (score already includes ape[k mod ratio]); a null
/// row is a token that does not exist (block 0's previous block) and counts as score -inf, kv 0.
///   out[c] = sum_k softmax_k(score[k][c]) * kv[k][c]   (softmax over k, separately per channel)
/// scratch: (span + 1) * d floats.
void CompressPool(const CompressParams& p, const float* const* kv, const float* const* score,
                  float* out, float* scratch);

}  // namespace nw::cpu
