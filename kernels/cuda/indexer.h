// Lightning-indexer logits on the GPU (kernels/cpu/attention.h IndexerScores) for many queries at
// once, over a contiguous key buffer with per-query ranges (ragged prefill) or over a paged key
// cache through a block table (decode and chunked prefill):
//   out[i, j] = kscale_j * sum_h w[i, h] * ReLU(q[i, h] . key_j),   j < len_i,
//   out[i, j] = -inf for len_i <= j < out_cols.
// Key j of query i is row ks[i] + j of `k` (contiguous; len_i = ke[i] - ks[i]), or logical key j of
// the query's block-table row (paged; physical row = block_table[query_row[i], j / page_size] *
// page_size + j % page_size; len_i = lengths[i]). Lengths are clamped to out_cols and to the key
// buffer; a paged key whose physical page lies outside the buffer gives a NaN logit.
//
// Key formats (q is fp32 for fp32 keys, bf16 otherwise):
//   kFp32  exact path: SIMT fp32 with the CPU's association order (8 interleaved partial dot
//          sums, heads summed in ascending order, every product and sum rounded separately), so
//          the logits are the CPU's bits. k_scale must be null.
//   kBf16  tensor cores, bf16 products with fp32 accumulation: contiguous keys with 16 or more
//          queries and 16-byte aligned q and k take Hopper wgmma with keys by bulk tensor copy
//          (indexer_wgmma.cu); one query per block (paged keys, fewer queries) takes wgmma with
//          the keys as a register operand (indexer_decode_wgmma.cu); the rest mma.sync m16n8k16.
//          k_scale optional (a per-key fp32 factor, e.g. an NVFP4 row's global scale).
//   kFp8   e4m3 codes widened exactly to bf16 (in registers for the decode wgmma kernel, in
//          shared memory for the mma.sync kernels), then as kBf16; k_scale required (the per-key
//          power-of-two scale of the fp8 index-K cache, 132 bytes a key).
// The fake-quantized index q/k of every precision profile (bf16, fp8, MXFP4, NVFP4 rows) are
// exact bf16 values or exact bf16 values times a per-row factor, so the bf16 path computes exact
// products; only the fp32 summation order differs from the CPU. Deterministic run to run.
// Supported: head_dim 64 or 128, 1 <= n_heads <= 64. Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

enum class IndexerKeyFormat { kFp32, kBf16, kFp8 };

/// The kernel of a contiguous-key launch with 16 or more bf16 queries: kAuto takes wgmma where it
/// applies (bf16 keys, 16-byte aligned q and k), kMma the mma.sync grouped kernel. For tests and
/// the perf mode; both give logits within the same bound of the CPU's.
enum class IndexerPrefillKernel { kAuto, kMma };

/// The kernel of a one-query-per-block launch (paged keys, or fewer than 16 queries): kWgmma the
/// Hopper wgmma kernel (indexer_decode_wgmma.cu; k 16-byte aligned), kMma the mma.sync kernel,
/// kAuto wgmma for e4m3 and bf16 keys where it applies (the faster on the H200,
/// docs/throughput.md), mma.sync otherwise. For tests and the perf mode; both give logits within
/// the same bound of the CPU's.
enum class IndexerDecodeKernel { kAuto, kWgmma, kMma };

struct IndexerLogitsParams {
  const void* q = nullptr;         // [m, n_heads, head_dim] fp32 (kFp32 keys) or bf16
  const float* w = nullptr;        // [m, n_heads] head weights (scales folded in)
  const void* k = nullptr;         // [key_rows, head_dim] fp32, bf16 or e4m3 codes
  const float* k_scale = nullptr;  // [key_rows] or null
  IndexerKeyFormat k_format = IndexerKeyFormat::kFp32;
  int64_t m = 0;
  int n_heads = 0;
  int head_dim = 0;
  int64_t key_rows = 0;
  // Contiguous keys (block_table == null).
  const int32_t* ks = nullptr;  // [m]
  const int32_t* ke = nullptr;  // [m]
  // Paged keys.
  const int32_t* block_table = nullptr;  // [rows, block_table_stride] physical page ids
  int64_t block_table_stride = 0;
  const int32_t* query_row = nullptr;  // [m] block-table row of each query
  const int32_t* lengths = nullptr;    // [m] visible keys of each query
  int page_size = 64;
  // Output.
  float* out = nullptr;  // [m, out_stride]
  int64_t out_stride = 0;
  int64_t out_cols = 0;
  int64_t max_len = 0;  // scheduling hint: an upper bound of the lengths (0: out_cols)
  // 64-key tiles per block of the one-query-per-block tensor-core kernel (paged keys or fewer
  // than 16 queries), 0: chosen from the shape. For tests: the results do not depend on it.
  int decode_tiles_per_block = 0;
  // cp.async stages of that kernel's key pipeline, 2, 3 or 4 (the mma.sync kernel runs 3 for 4);
  // 0: the default (2 for both kernels: more blocks fit a multiprocessor). For tests and the
  // perf mode: the results do not depend on it.
  int decode_stages = 0;
  IndexerPrefillKernel prefill_kernel = IndexerPrefillKernel::kAuto;
  IndexerDecodeKernel decode_kernel = IndexerDecodeKernel::kAuto;
  // Blocks the wgmma kernel spreads each query block's key tiles over (its grid's y), 0: chosen
  // from the shape. For tests: the results do not depend on it.
  int prefill_key_splits = 0;
};
Status LaunchIndexerLogits(const IndexerLogitsParams& p, cudaStream_t stream);

}  // namespace nw::cuda
