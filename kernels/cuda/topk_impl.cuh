// Device pieces shared by the top-k kernels (kernels/cuda/topk.cu, topk_resident.cu): the rank
// key, the radix pass's threshold search, warp appends, the register bitonic sort, the segment
// bookkeeping of long rows, and the resident kernel's launcher. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/topk.h"

namespace nw::cuda::topk_detail {

inline constexpr int kThreads = 512;  // a block kernel's threads
inline constexpr int kWarps = kThreads / 32;
static_assert(kWarps <= 32);
inline constexpr int kBins = 2048;  // a radix pass's bins (11 bits)

/// Unsigned key whose order is the rank order: NaN -> 0, -0 -> +0, numbers order-preserving.
/// Adding +0 turns -0 into +0 (round to nearest) and leaves every other value as it is; then the
/// sign bit set flips every bit, clear sets the sign bit.
__device__ __forceinline__ uint32_t RankKey(float f) {
  const uint32_t u = __float_as_uint(__fadd_rn(f, 0.0f));
  const uint32_t key = u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
  return f != f ? 0u : key;
}

inline constexpr int kBinsPerThread = kBins / kThreads;

/// Reads this thread's bins of s.hist (thread t owns bins [t * kBinsPerThread, ...)) into h and
/// returns how many entries the bins above them hold: suffix sums by shuffles within each warp
/// and one reduction over the later warps' totals (s.scan). One barrier; the caller must place
/// one before s.scan is written again.
template <class S>
__device__ __forceinline__ uint32_t EntriesAboveMyBins(S& s, uint32_t (&h)[kBinsPerThread]) {
  const int lo = threadIdx.x * kBinsPerThread;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t local = 0;
#pragma unroll
  for (int b = 0; b < kBinsPerThread; ++b) {
    h[b] = s.hist[lo + b];
    local += h[b];
  }
  uint32_t suffix = local;  // this thread's bins and the warp's later threads'
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t v = __shfl_down_sync(detail::kFullMask, suffix, o);
    if (lane + o < 32) suffix += v;
  }
  if (lane == 0) s.scan[warp] = suffix;  // the warp's total
  __syncthreads();
  // The later warps' totals: lane w < kWarps reads warp w's, one reduction adds them.
  return suffix - local +
         __reduce_add_sync(detail::kFullMask, lane < kWarps && lane > warp ? s.scan[lane] : 0u);
}

/// After hist[0..kBins) is filled: finds bin b with count(bins > b) < remaining <= count(>= b)
/// and stores b, count(bins > b) and count(b) into s.bin / s.above / s.count. A pass that counts
/// fewer bits leaves the upper bins zero, which never qualify. Two barriers; ends with one.
/// S has hist[kBins], scan[>= kWarps], bin, above and count.
template <class S>
__device__ void FindThresholdBin(S& s, uint32_t remaining) {
  const int lo = threadIdx.x * kBinsPerThread;
  uint32_t h[kBinsPerThread];
  uint32_t above = EntriesAboveMyBins(s, h);  // entries in bins above this thread's range
#pragma unroll
  for (int b = kBinsPerThread - 1; b >= 0; --b) {
    if (above < remaining && above + h[b] >= remaining) {
      s.bin = static_cast<uint32_t>(lo + b);
      s.above = above;
      s.count = h[b];
    }
    above += h[b];
  }
  __syncthreads();
}

/// Appends `value` to buf at the next free slot of *count for every lane whose pred is set: one
/// shared-memory atomic a warp. Slots follow the atomic's order, so the order across warps is not
/// deterministic (callers sort what they gather). The whole warp must call it.
template <class T>
__device__ __forceinline__ void WarpAppend(bool pred, T value, uint32_t* count, T* buf,
                                           uint32_t capacity) {
  const unsigned mask = __ballot_sync(detail::kFullMask, pred);
  if (mask == 0u) return;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(mask) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(count, static_cast<uint32_t>(__popc(mask)));
  base = __shfl_sync(detail::kFullMask, base, leader);
  const uint32_t at = base + __popc(mask & ((1u << lane) - 1u));
  if (pred && at < capacity) buf[at] = value;  // always below; guards a logic error
}

/// Sorts items[0..size) (size a power of two, at most kThreads) descending, one item a thread in
/// registers: a bitonic network whose exchanges of stride >= 32 go through `exchange`, alternating
/// between its two halves so one block barrier a stage suffices (a stage writes the half that the
/// stage before the last read), and whose narrower ones are shuffles within a warp (unrolled).
/// Threads at or past size hold 0 and take part. Ends with a barrier.
__device__ inline void RegisterSortDescending(unsigned long long* items, int size,
                                              unsigned long long (*exchange)[kThreads]) {
  const int t = threadIdx.x;
  unsigned long long v = t < size ? items[t] : 0ull;
  int half = 0;
  // A pair's lower position keeps the larger item in a descending run, the smaller in an
  // ascending one; runs of `block` alternate, the first descending.
  auto exchange_with = [&](unsigned long long o, int block, int stride) {
    const bool keep_max = ((t & block) == 0) == ((t & stride) == 0);
    v = (v > o) == keep_max ? v : o;
  };
#pragma unroll
  for (int block = 2; block <= 32; block <<= 1) {  // runs within a warp: shuffles only
    if (block > size) break;
#pragma unroll
    for (int stride = block / 2; stride > 0; stride >>= 1) {
      exchange_with(__shfl_xor_sync(detail::kFullMask, v, stride), block, stride);
    }
  }
  for (int block = 64; block <= size; block <<= 1) {
    for (int stride = block / 2; stride >= 32; stride >>= 1) {
      exchange[half][t] = v;
      __syncthreads();
      exchange_with(exchange[half][t ^ stride], block, stride);
      half ^= 1;
    }
#pragma unroll
    for (int stride = 16; stride > 0; stride >>= 1) {
      exchange_with(__shfl_xor_sync(detail::kFullMask, v, stride), block, stride);
    }
  }
  if (t < size) items[t] = v;
  __syncthreads();
}

/// A float whose RankKey is `key` (the inverse of RankKey; key 0 gives a NaN).
__device__ __forceinline__ float KeyValue(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? key & 0x7FFFFFFFu : ~key);
}

__device__ __forceinline__ unsigned long long RankItem(uint32_t key, int64_t i) {
  return (static_cast<unsigned long long>(key) << 32) |
         static_cast<unsigned long long>(0xFFFFFFFFu - static_cast<uint32_t>(i));
}

// Segments: with count > 1 block-row q is segment q % count (entries [s * len, (s + 1) * len))
// of row q / count; its top-k set goes, in ascending index order or in rank order, to cand_index
// (row indices) and cand_score (values of the same rank keys) at [r * count * k + s * k ..), and
// segment 0's block writes the row's number of candidates to cand_len[r] (every segment but a
// row's last contributes k, as len >= k). Either order lists equal keys in ascending index order,
// which makes the second pass's lower-position tie-break the lower-index one. With count == 1 rows
// are rows and their top-k goes to p.out, through map[r * map_width + position] when map is set
// (the second pass over candidates).
struct Segments {
  int64_t count = 1;
  int64_t len = 0;
  int32_t* cand_index = nullptr;
  float* cand_score = nullptr;
  int32_t* cand_len = nullptr;
  const int32_t* map = nullptr;
  int64_t map_width = 0;
};

/// Row r's entries: its length clamped to [0, n].
__device__ __forceinline__ int64_t RowLength(const TopKParams& p, int64_t r) {
  if (p.lengths == nullptr) return p.n;
  return min(max(static_cast<int64_t>(p.lengths[r]), int64_t{0}), p.n);
}

/// The entries a block takes: row r's, or (segmented) those of its segment starting at `off`.
__device__ __forceinline__ int BlockLength(const TopKParams& p, const Segments& seg, int64_t r,
                                           int64_t off) {
  const int64_t len = RowLength(p, r);
  return static_cast<int>(seg.count > 1 ? min(max(len - off, int64_t{0}), seg.len) : len);
}

/// A segmented row's candidate count: k from each segment but the last, which gives
/// min(k, its entries) (segments are at least k long).
__device__ __forceinline__ int32_t SegmentCandidates(const TopKParams& p, const Segments& seg,
                                                     int64_t r) {
  const int64_t row_len = RowLength(p, r);
  const int64_t segs = (row_len + seg.len - 1) / seg.len;
  if (segs == 0) return 0;
  return static_cast<int32_t>((segs - 1) * p.k +
                              min(static_cast<int64_t>(p.k), row_len - (segs - 1) * seg.len));
}

/// The resident kernel (topk_resident.cu) takes rows, or segments, of at most kResidentLen
/// entries and k <= kThreads: each thread keeps its 32 entries' rank keys in registers.
inline constexpr int kResidentLen = 16384;
static_assert(kResidentLen == kTopKSegment);

/// Launches the resident kernel over p's rows (seg.count == 1, p.n <= kResidentLen; through
/// seg.map when set) or over p.rows x seg.count segments of seg.len == kResidentLen entries.
Status LaunchTopKResident(const TopKParams& p, const Segments& seg, cudaStream_t stream);

}  // namespace nw::cuda::topk_detail
