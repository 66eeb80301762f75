// DeepSeek-V4 sparse attention on the GPU (kernels/cpu/attention.h SparseAttention) for many
// queries at once: each query attends to the union of two gathered entry sets (the sliding window
// and the compressed entries), with one softmax and a per-head sink in the denominator:
//   out[i, h] = sum_j e^{z_j} kv_j / (sum_j e^{z_j} + e^{sink_h}),   z_j = scale * q[i, h] . kv_j,
// over the entries j listed in sets[0] then sets[1]: set s contributes kv rows
// indices_s[i, 0 .. len_s[i]) of its buffer; an index < 0 or >= rows is skipped (FlashMLA's -1
// padding). A query with no entry gets out = 0. K = V (one KV head of head_dim values).
//
// KV formats: kFp32 and kBf16 rows [rows, head_dim]; kV4Fp8 the paged V4 fp8 cache of quant.h
// (row r = slot r: page r / page_size), dequantized exactly on load.
// Paths:
//   SIMT (q fp32): fp32 dot products and accumulation, any head_dim <= 512 (multiple of 4), any
//     n_heads; agrees with the CPU to fp32 rounding (exp and summation order differ).
//   tensor cores (q bf16): mma.sync m16n8k16 bf16 for Q K^T and P V with fp32 accumulation and
//     an online softmax over 32-entry tiles (FlashAttention-2 style; probabilities rounded to bf16
//     for P V; bf16 rows of the next tile arrive by cp.async meanwhile); head_dim 128 or 512,
//     n_heads <= 64, kv kBf16 or kV4Fp8. With head_dim 512 and kBf16 KV: Hopper wgmma instead
//     (attention_wgmma.cu: 64-entry tiles, two warpgroups splitting the entries for S and the
//     output dims for P V), same contract.
//   few heads, bf16 values (q fp32, bf16_values): q and the KV rows hold bf16 values (what the
//     precision profiles that round activations and KV to bf16 store). With head_dim 128, at most
//     8 heads and kBf16 KV, one warp per query runs S^T = K Q^T and O^T = V^T P^T on mma.sync
//     (heads are the 8 columns, so no row is padding; P split into three bf16 pieces that sum to
//     it exactly), the next 32 rows on their way by cp.async meanwhile: every product exact,
//     only the fp32 summation order differs from the CPU, within SIMT's tolerance. Other shapes
//     and kFp32 KV take the SIMT path.
// Both are deterministic run to run. Every set's kv must be 16-byte aligned (vector loads).
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/quant.h"

namespace nw::cuda {

enum class KvFormat { kFp32, kBf16, kV4Fp8 };

/// The tensor-core kernel (q_bf16). kAuto takes the producer-warpgroup kernel where it applies
/// (head_dim 512, bf16 KV or V4 fp8 KV with 64 rope dims): a producer warpgroup copies (or, fp8,
/// widens) the gathered rows into two whole-row buffers, and two consumer warpgroups each take S of
/// one tile of a pair and half of O's dims; else the mma.sync kernel. The others, for tests and the
/// perf mode: kWgmmaPairs forces the producer-warpgroup kernel; kWgmmaDimsSplit the dims-split
/// kernel (each warpgroup owning half of the dims, S (t + 1) issued behind P V (t); bf16 KV);
/// kWgmmaEntrySplit the earlier wgmma kernel (each warpgroup half of a tile's entries, phases
/// separated by block barriers), rows by cp.async; kWgmmaTma that kernel with Q and the rows by
/// bulk tensor copies (one 128-byte box a row and atom); kMma the mma.sync kernel. All meet the
/// same bound.
enum class AttentionTcKernel {
  kAuto,
  kWgmmaPairs,
  kWgmmaDimsSplit,
  kWgmmaEntrySplit,
  kWgmmaTma,
  kMma
};

struct KvSet {
  const void* kv = nullptr;  // kFp32/kBf16: [rows, head_dim]; kV4Fp8: [rows / page_size pages]
  int64_t rows = 0;          // entries addressable in kv
  const int32_t* indices = nullptr;  // [m, index_stride]; null: the set is empty
  const int32_t* lengths = nullptr;  // [m] or null (every query uses index_stride indices)
  int64_t index_stride = 0;
};

struct SparseAttentionParams {
  const void* q = nullptr;  // [m, n_heads, head_dim] fp32 (SIMT) or bf16 (tensor cores)
  bool q_bf16 = false;
  bool bf16_values = false;     // q (fp32) and KV values are bf16 values: the few-heads kernel
  const float* sink = nullptr;  // [n_heads]
  float* out = nullptr;         // [m, n_heads, head_dim]
  bool round_bf16 = false;      // out rounded to bf16 as stored (an activation rounding point)
  int64_t m = 0;
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  KvFormat kv_format = KvFormat::kFp32;
  V4KvLayout kv_layout;  // kV4Fp8 only (head_dim must match)
  KvSet sets[2];
  AttentionTcKernel tc_kernel = AttentionTcKernel::kAuto;
};
Status LaunchSparseAttention(const SparseAttentionParams& p, cudaStream_t stream);

}  // namespace nw::cuda
