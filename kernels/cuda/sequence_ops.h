// Small per-token operations of the V4 forward pass on the GPU, the glue between the big kernels:
// embedding rows, the compressor's ape add, scaling, the sliding-window ring, the attention entry
// lists (window and compressed, contiguous or paged addressing), and the indexer probes. Each
// follows engine/cpu/sequence.cc's definition exactly (integer bookkeeping, or single rounded
// products and sums).
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

/// x[t, i*dim + c] = table[ids[t]*dim + c] for i < copies (the hc_mult residual streams).
struct EmbedParams {
  const float* table = nullptr;  // [vocab, dim]
  const int32_t* ids = nullptr;  // [tokens]
  float* x = nullptr;            // [tokens, copies * dim]
  int64_t tokens = 0;
  int64_t dim = 0;
  int copies = 1;
};
Status LaunchEmbed(const EmbedParams& p, cudaStream_t stream);

/// score[t, c] += ape[((first_pos + t) mod ratio), c] for c < width (score rows of x_stride).
struct AddApeParams {
  float* score = nullptr;      // [tokens, stride]
  const float* ape = nullptr;  // [ratio, width]
  int64_t tokens = 0;
  int64_t width = 0;
  int64_t stride = 0;  // 0: width
  int64_t first_pos = 0;
  int ratio = 0;
};
Status LaunchAddApe(const AddApeParams& p, cudaStream_t stream);

/// x[i] *= scale over n values.
Status LaunchScale(float* x, int64_t n, float scale, cudaStream_t stream);

/// Attention entry lists of a chunk of `tokens` queries at positions [first_pos, first_pos +
/// tokens).
///   window:     for query t at p: window positions max(0, p - W + 1) .. p, oldest first, as rows
///               of a buffer [ring (W rows, position q at row q mod W) | the chunk (row W + q -
///               first_pos)];
///   compressed: mode kAll: entries 0 .. (p + 1) / ratio - 1; mode kSelected: the row's selected
///               entries (sel[t, 0..sel_width), -1 = none) in ascending order; either mapped to
///               rows through the page table when it is given (row = pages[i / page_size] *
///               page_size + i mod page_size), else row = entry id.
enum class CompressedMode { kNone, kAll, kSelected };
struct AttnIndicesParams {
  int64_t tokens = 0;
  int64_t first_pos = 0;
  int window = 0;
  int32_t* win_idx = nullptr;  // [tokens, window]
  int32_t* win_len = nullptr;  // [tokens]
  CompressedMode mode = CompressedMode::kNone;
  int ratio = 0;
  const int32_t* sel = nullptr;    // [tokens, sel_width] (kSelected)
  int sel_width = 0;               // <= 2048
  const int32_t* pages = nullptr;  // page table of the compressed store, or null
  int page_size = 64;
  int32_t* comp_idx = nullptr;  // [tokens, comp_stride]
  int32_t* comp_len = nullptr;  // [tokens]
  int64_t comp_stride = 0;      // kAll: >= the largest visible count; kSelected: >= sel_width
};
Status LaunchAttnIndices(const AttnIndicesParams& p, cudaStream_t stream);

/// ring[(q mod W), :] = chunk[q - first_pos, :] for q in [max(first_pos, end - W), end), end =
/// first_pos + tokens.
struct RingUpdateParams {
  float* ring = nullptr;         // [W, dim]
  const float* chunk = nullptr;  // [tokens, dim]
  int64_t tokens = 0;
  int64_t first_pos = 0;
  int window = 0;
  int64_t dim = 0;
};
Status LaunchRingUpdate(const RingUpdateParams& p, cudaStream_t stream);

/// Copies rows of a store into rows addressed through a page table (or contiguous when pages is
/// null): dst[map(first_entry + i), :] = src[i, :] for i < n; with dst_bf16 also the same rows as
/// bf16 bits (round to nearest even; exact for the stores that hold bf16 values: the bf16 copy
/// of the compressed KV the attention reads under the bf16 profiles).
struct StoreRowsParams {
  const float* src = nullptr;  // [n, dim]
  float* dst = nullptr;
  uint16_t* dst_bf16 = nullptr;  // optional, same row layout as dst
  const int32_t* pages = nullptr;
  int page_size = 64;
  int64_t first_entry = 0;
  int64_t n = 0;
  int64_t dim = 0;
};
Status LaunchStoreRows(const StoreRowsParams& p, cudaStream_t stream);

/// Indexer probes (engine/cpu/sequence.cc RecordProbe) for query rows of a block: row r at
/// position pos[r] sees visible[r] entries with scores[r, 0..visible); topk[r, 0..min(k,
/// visible)) are its selected ids. Needle entries are the ratio-`ratio` entries i (pooling tokens
/// [ratio(i-1), ratio(i+1))) that overlap [needle_begin, needle_end). next_score is the score of
/// the best entry left out of topk (rank order), NaN when every visible entry is selected.
struct ProbeParams {
  const float* scores = nullptr;  // [rows, score_stride]
  int64_t score_stride = 0;
  const int32_t* topk = nullptr;     // [rows, k]
  const int32_t* visible = nullptr;  // [rows]
  int64_t rows = 0;
  int k = 0;
  int ratio = 4;
  int64_t needle_begin = 0;
  int64_t needle_end = 0;
  int64_t key_begin = 0;  // keys [0, key_begin) were not selectable: min(k, visible - key_begin)
                          // of the row's topk ids are real (LaunchDropSelectedBelow)
  int32_t* needle_rank = nullptr;  // [rows]
  uint8_t* in_topk = nullptr;      // [rows]
  float* needle_score = nullptr;   // [rows]
  float* kth_score = nullptr;      // [rows]
  float* next_score = nullptr;     // [rows] the best entry not selected (NaN if none)
};
Status LaunchProbe(const ProbeParams& p, cudaStream_t stream);

/// A selection restricted to keys [begin, len_r) of each row, as cpu::TopK over a width of
/// min(k, len_r - begin) with the keys below `begin` scored -inf: before the top-k,
/// LaunchMaskKeyPrefix sets scores[r, 0..min(begin, cols)) to -inf; after it,
/// LaunchDropSelectedBelow replaces every id below `begin` in sel[r, 0..k) by -1 (such ids rank
/// after every finite score, so they are the row's tail and -1 is the CPU's padding).
Status LaunchMaskKeyPrefix(float* scores, int64_t rows, int64_t stride, int64_t cols, int64_t begin,
                           cudaStream_t stream);
Status LaunchDropSelectedBelow(int32_t* sel, int64_t rows, int k, int64_t begin,
                               cudaStream_t stream);

}  // namespace nw::cuda
