// The resident top-k kernel: rows (or segments of long rows) of at most kResidentLen entries and
// k <= kThreads, with each thread's entries held in registers; see topk.h for the contract.
//
// One block a row, 512 threads, 8 16-byte words a thread (entries 4t + 2048u + c, u < 8, c < 4),
// so a 16,384-entry row is read once, by 16-byte loads all issued up front, and never staged in
// shared memory. Entries are ranked by the 46-bit composite C = key << 14 | (16383 - position):
// the rank key (topk_impl.cuh) then the lower position, so every entry's C is distinct and the
// top `take` composites are exactly the CPU reference's selection, ties included. Positions past
// the row's end (inside the last 2,048-entry slice) hold key 0 and rank below every entry of the
// row, NaN included, so they are never selected and need no bounds checks.
//
// A radix select over C: pass 0 counts the top 11 bits (the key's top 11) from registers, and
// pass 1 the next 11 bits of the entries in pass 0's threshold bin, also from registers. Each
// later pass counts the next 11 bits of the entries still in the running (prefix match), until
// the threshold bin holds exactly the entries still to take (usually after pass 1 already). When
// the entries at or above the threshold bin fit the candidate buffer (4,096 items), they are
// gathered there from registers and the later passes read only them; otherwise (heavy ties) the
// passes recount from global memory (the row is then mostly in L2) and gather as soon as the
// survivors fit, so the keys need not stay live in registers. Gathered items are key << 32 |
// (16,383 - position), ordered as C. When the gather happened with the threshold bin exactly
// full, the gathered items are the selection and are sorted where they lie; otherwise the
// selection, every C at or above the final prefix, is appended in any order. A bucket sort puts it
// in rank order: 2,048 buckets linear over the selection's own range (by position where its keys
// are all equal), a shared-memory atomic a item for its slot, and each item's rank within its
// bucket by comparing it with the bucket's others. A bucket holding more than kCrowded items
// (items crowded into a narrow range) falls back to the bitonic sort.
#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/topk_impl.cuh"

namespace nw::cuda::topk_detail {
namespace {

constexpr int kSliceLen = 4 * kThreads;            // entries one 16-byte word a thread covers
constexpr int kSlices = kResidentLen / kSliceLen;  // words a thread: 8
constexpr int kIndexBits = 14;                     // a position within a row
constexpr int kCompositeBits = 32 + kIndexBits;    // the radix select's width
constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1u;
constexpr int kCandidateCap = 4096;  // items gathered for the later passes
constexpr uint32_t kCrowded = 32;    // a bucket's items before the bitonic sort
static_assert(kResidentLen == 1 << kIndexBits);
static_assert(kResidentLen % kSliceLen == 0);

struct BucketScratch {
  uint32_t start[kBins];             // items in the buckets above each bucket
  unsigned long long tmp[kThreads];  // items grouped by bucket
};

// One block a row: hist, n_cand, n_items, crowded, key_lo and key_hi are reset before the loads.
struct ResidentShared {
  uint32_t hist[kBins];
  uint32_t scan[kWarps];
  unsigned long long items[kThreads];  // the selection, then in rank order
  uint32_t key_lo;                     // the selection's smallest and largest key
  uint32_t key_hi;
  union {
    unsigned long long cand[kCandidateCap];    // gathered items (Item)
    BucketScratch bucket;                      // the bucket sort's (after the selection)
    unsigned long long exchange[2][kThreads];  // the bitonic fallback's
  };
  uint32_t bin;  // FindThresholdBin's results
  uint32_t above;
  uint32_t count;
  uint32_t n_cand;
  uint32_t n_items;
  uint32_t crowded;
};

/// Resets what a row's first atomics count into. No barrier.
__device__ __forceinline__ void ResetRow(ResidentShared& s) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
  if (threadIdx.x == 0) {
    s.n_cand = 0;
    s.n_items = 0;
    s.crowded = 0;
    s.key_lo = 0xFFFFFFFFu;
    s.key_hi = 0u;
  }
}

/// The radix select's 46-bit composite of (key, position e): key, then the lower position.
__device__ __forceinline__ unsigned long long Composite(uint32_t key, int e) {
  return (static_cast<unsigned long long>(key) << kIndexBits) |
         static_cast<unsigned long long>(kIndexMask - static_cast<uint32_t>(e));
}

/// What the gather, the selection and the sort store: key << 32 | (16383 - e). The same order
/// as the composite (its two halves with zeros between), built without shifting the key: the key
/// is the upper word as it is, the lower word one subtraction from a per-thread constant.
__device__ __forceinline__ unsigned long long Item(uint32_t key, int e) {
  return (static_cast<unsigned long long>(key) << 32) |
         static_cast<unsigned long long>(kIndexMask - static_cast<uint32_t>(e));
}
__device__ __forceinline__ unsigned long long ItemComposite(unsigned long long item) {
  return ((item >> 32) << kIndexBits) | (item & kIndexMask);
}
__device__ __forceinline__ int ItemPosition(unsigned long long item) {
  return static_cast<int>(kIndexMask - static_cast<uint32_t>(item));
}

/// start[b] = hist[b + 1] + ... + hist[kBins - 1] for every bin b. Two barriers; ends with one.
__device__ void BinsAbove(ResidentShared& s) {
  const int lo = threadIdx.x * kBinsPerThread;
  uint32_t h[kBinsPerThread];
  uint32_t above = EntriesAboveMyBins(s, h);
#pragma unroll
  for (int b = kBinsPerThread - 1; b >= 0; --b) {
    s.bucket.start[lo + b] = above;
    above += h[b];
  }
  __syncthreads();
}

/// Sorts src[0..m) (distinct items, 1 <= m <= kThreads) descending into s.items[0..m). src is
/// s.items or s.cand (the bucket and bitonic scratch share s.cand's storage: every thread reads
/// its item before the first barrier, and the scratch is written only after it). Ends with a
/// barrier; called behind one (the items are complete).
__device__ void SortItemsDescending(ResidentShared& s, const unsigned long long* src, int m) {
  const int t = threadIdx.x;
  const bool mine = t < m;
  const unsigned long long v = mine ? src[t] : 0ull;
  for (int b = t; b < kBins; b += kThreads) s.hist[b] = 0;
  // The selection's key range: a warp reduction, one atomic a warp.
  const uint32_t key = static_cast<uint32_t>(v >> 32);
  const uint32_t key_lo = __reduce_min_sync(detail::kFullMask, mine ? key : 0xFFFFFFFFu);
  const uint32_t key_hi = __reduce_max_sync(detail::kFullMask, mine ? key : 0u);
  if ((t & 31) == 0 && key_lo <= key_hi) {
    atomicMin(&s.key_lo, key_lo);
    atomicMax(&s.key_hi, key_hi);
  }
  __syncthreads();
  // Every item lies in [key_lo << 32, key_hi << 32 | 16383] (positions are below 16,384):
  // ordered by key, or by position where the keys are equal.
  const unsigned long long lo = static_cast<unsigned long long>(s.key_lo) << 32;
  const unsigned long long hi = (static_cast<unsigned long long>(s.key_hi) << 32) | kIndexMask;
  // (v - lo) >> shift < kBins: the bucket is linear in the item over the selection's own range.
  const int shift = max(64 - __clzll(static_cast<long long>(hi - lo)) - 11, 0);
  const uint32_t b = mine ? static_cast<uint32_t>((v - lo) >> shift) : 0u;
  uint32_t slot = 0;
  if (mine) {
    slot = atomicAdd(&s.hist[b], 1u);
    if (slot >= kCrowded) s.crowded = 1u;
  }
  __syncthreads();
  if (s.crowded != 0u) {
    int size = 1;
    while (size < m) size <<= 1;
    if (t < size) s.items[t] = v;  // 0 past m
    __syncthreads();
    RegisterSortDescending(s.items, size, s.exchange);
    return;
  }
  BinsAbove(s);
  const uint32_t first = mine ? s.bucket.start[b] : 0u;
  if (mine) s.bucket.tmp[first + slot] = v;
  __syncthreads();
  if (mine) {
    const uint32_t end = first + s.hist[b];
    uint32_t rank = first;
    for (uint32_t j = first; j < end; ++j) rank += s.bucket.tmp[j] > v ? 1u : 0u;
    s.items[rank] = v;
  }
  __syncthreads();
}

/// Loads this thread's entries of a row (4t + kSliceLen u + c) into v: 16-byte loads, all issued
/// before any use. kFull: the row is 16-byte aligned and has kResidentLen entries. Otherwise the
/// first `slices` slices are read, by 16-byte loads where the row is aligned and the word lies
/// inside it, and entries past the end read as NaN (key 0, ranked below the row).
template <bool kFull>
__device__ __forceinline__ void LoadRow(const float* row, int n, int slices, bool vec,
                                        float (&v)[kSlices][4]) {
  const int t = threadIdx.x;
  const float nan = __int_as_float(0x7FFFFFFF);
#pragma unroll
  for (int u = 0; u < kSlices; ++u) {
    const int e = 4 * t + kSliceLen * u;
    if (kFull || (u < slices && vec && e + 3 < n)) {
      const float4 w = *reinterpret_cast<const float4*>(row + e);
      v[u][0] = w.x;
      v[u][1] = w.y;
      v[u][2] = w.z;
      v[u][3] = w.w;
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) v[u][c] = u < slices && e + c < n ? row[e + c] : nan;
    }
  }
}

/// kMerge: the pass over a long row's candidates (seg.map set). They lie in rank order, segment
/// by segment, so a 16-byte word's four entries are neighbours in rank and crowd the same few top
/// bins; pass 0 then counts a word whose four entries share a bin with one atomic, not four.
template <bool kMerge>
__global__ void __launch_bounds__(kThreads, 2) TopKResidentKernel(TopKParams p, Segments seg) {
  __shared__ ResidentShared s;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool segmented = seg.count > 1;
  const int64_t q = blockIdx.x;  // one block a row or segment
  const int64_t r = q / seg.count, sg = q % seg.count;
  const int off = static_cast<int>(sg * seg.len);  // < n < 2^31
  const float* row = p.scores + r * p.stride + off;
  const int n = BlockLength(p, seg, r, off);
  const int take = min(p.k, n);
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15u) == 0;
  const bool full = vec && n == kResidentLen;
  const int slices = full ? kSlices : (n + kSliceLen - 1) / kSliceLen;

  // 1. Every load up front, then the rank keys and pass 0's count of their top 11 bits.
  float v[kSlices][4];
  if (full) {
    LoadRow<true>(row, n, slices, vec, v);
  } else {
    LoadRow<false>(row, n, slices, vec, v);
  }
  ResetRow(s);
  __syncthreads();
  const bool select = take < n;
  uint32_t key[kSlices][4];
#pragma unroll
  for (int u = 0; u < kSlices; ++u) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      key[u][c] = RankKey(v[u][c]);
      asm("" : "+r"(key[u][c]));  // keep the key, not the float (no recomputing it later)
      if (!kMerge && select && u < slices) atomicAdd(&s.hist[key[u][c] >> (32 - 11)], 1u);
    }
    if (kMerge && select && u < slices) {
      const uint32_t b = key[u][0] >> (32 - 11);
      if ((key[u][1] >> (32 - 11)) == b && (key[u][2] >> (32 - 11)) == b &&
          (key[u][3] >> (32 - 11)) == b) {
        atomicAdd(&s.hist[b], 4u);
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) atomicAdd(&s.hist[key[u][c] >> (32 - 11)], 1u);
      }
    }
  }
  __syncthreads();

  // 2. The radix select: C >> hi == prefix for the entries still in the running. Pass 1 (the
  // next 11 bits of the entries in pass 0's threshold bin) also counts from registers; then, when
  // the entries at or above the threshold bin fit the candidate buffer, they are gathered there
  // from registers and any later pass reads only them. A row whose entries there do not fit (heavy
  // ties: more than 4,096 entries share the key's top 22 bits) recounts from global memory
  // instead, so the keys need not stay live across the later passes.
  uint32_t remaining = static_cast<uint32_t>(take);
  int hi = kCompositeBits;
  unsigned long long prefix = 0;
  uint32_t n_cand = 0;
  bool gathered = false;
  // The composite of position e (< slices * kSliceLen) from global memory.
  auto composite_at = [&](int e) { return Composite(e < n ? RankKey(row[e]) : 0u, e); };
  const int span = slices * kSliceLen;
  if (select) {
    FindThresholdBin(s, remaining);
    uint32_t count = s.count;
    remaining -= s.above;
    prefix = s.bin;
    hi = kCompositeBits - 11;
    if (count != remaining) {
      // Pass 1 from registers: key - (bin << 21) < 2^21 picks the threshold bin's entries, and
      // its upper 11 bits are their next 11.
      const uint32_t bin_first = static_cast<uint32_t>(prefix) << (32 - 11);
      for (int b = t; b < kBins; b += kThreads) s.hist[b] = 0;
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kSlices; ++u) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint32_t d = key[u][c] - bin_first;
          if (u < slices && d < (1u << (32 - 11))) atomicAdd(&s.hist[d >> (32 - 22)], 1u);
        }
      }
      __syncthreads();
      FindThresholdBin(s, remaining);
      count = s.count;
      remaining -= s.above;
      prefix = (prefix << 11) | s.bin;
      hi = kCompositeBits - 22;
    }
    if (static_cast<uint32_t>(take) - remaining + count <= kCandidateCap) {
      // Gather every entry whose key is at least the threshold bin's first (hi >= kIndexBits
      // here, so the composite's bound is a key's): a count a thread, a warp scan and one atomic
      // a warp place them; each thread writes its own, as items.
      const uint32_t key_lowest = static_cast<uint32_t>(prefix << (hi - kIndexBits));
      uint32_t mine = 0;
#pragma unroll
      for (int u = 0; u < kSlices; ++u) {
#pragma unroll
        for (int c = 0; c < 4; ++c) mine += u < slices && key[u][c] >= key_lowest ? 1u : 0u;
      }
      uint32_t inclusive = mine;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t x = __shfl_up_sync(detail::kFullMask, inclusive, o);
        if (lane >= o) inclusive += x;
      }
      uint32_t base = 0;
      if (lane == 31 && inclusive > 0u) base = atomicAdd(&s.n_cand, inclusive);
      unsigned long long* at = s.cand + __shfl_sync(detail::kFullMask, base, 31) + inclusive - mine;
#pragma unroll
      for (int u = 0; u < kSlices; ++u) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (u < slices && key[u][c] >= key_lowest)
            *at++ = Item(key[u][c], 4 * t + kSliceLen * u + c);
        }
      }
      gathered = true;
      __syncthreads();
      n_cand = s.n_cand;
    }
    while (count != remaining && hi > 0) {
      // The next (up to) 11 bits of the entries matching the prefix.
      const int lo = max(hi - 11, 0);
      const uint32_t bin_mask = (1u << (hi - lo)) - 1u;
      for (int b = t; b < kBins; b += kThreads) s.hist[b] = 0;
      __syncthreads();
      auto count_one = [&](unsigned long long c) {
        if ((c >> hi) == prefix) atomicAdd(&s.hist[static_cast<uint32_t>(c >> lo) & bin_mask], 1u);
      };
      if (gathered) {
        for (uint32_t j = t; j < n_cand; j += kThreads) count_one(ItemComposite(s.cand[j]));
      } else {
        for (int e = t; e < span; e += kThreads) count_one(composite_at(e));
      }
      __syncthreads();
      FindThresholdBin(s, remaining);
      count = s.count;
      remaining -= s.above;
      prefix = (prefix << (hi - lo)) | s.bin;
      hi = lo;
      if (!gathered && count != remaining &&
          static_cast<uint32_t>(take) - remaining + count <= kCandidateCap) {
        const unsigned long long lowest = prefix << hi;
        for (int base = warp * 32; base < span; base += kThreads) {
          const int e = base + lane;
          const unsigned long long c = composite_at(e);
          const bool in = c >= lowest;
          const unsigned mask = __ballot_sync(detail::kFullMask, in);
          uint32_t at = 0;
          if (lane == 0 && mask != 0u) at = atomicAdd(&s.n_cand, __popc(mask));
          at = __shfl_sync(detail::kFullMask, at, 0) + __popc(mask & ((1u << lane) - 1u));
          if (in) s.cand[at] = Item(static_cast<uint32_t>(c >> kIndexBits), e);
        }
        gathered = true;
        __syncthreads();
        n_cand = s.n_cand;
      }
    }
  }

  // 3. The selection: every composite at or above the prefix (or, taking the whole row, every
  // entry inside it). When the gathered items are exactly the selection (the usual case: the
  // threshold bin held exactly the entries still to take when they were gathered), the sort
  // reads them where they are; otherwise the selection is appended to s.items in any order.
  const unsigned long long lowest = prefix << hi;
  const unsigned long long* selection = s.items;
  if (gathered && n_cand == static_cast<uint32_t>(take)) {
    selection = s.cand;
  } else if (gathered) {
    for (uint32_t base = warp * 32; base < n_cand; base += kThreads) {
      const uint32_t j = base + lane;
      const unsigned long long item = j < n_cand ? s.cand[j] : 0ull;
      WarpAppend(j < n_cand && ItemComposite(item) >= lowest, item, &s.n_items, s.items,
                 static_cast<uint32_t>(kThreads));
    }
    __syncthreads();
  } else if (take > 0) {
    for (int base = warp * 32; base < span; base += kThreads) {
      const int e = base + lane;
      const unsigned long long c = composite_at(e);
      WarpAppend(select ? c >= lowest : e < n, Item(static_cast<uint32_t>(c >> kIndexBits), e),
                 &s.n_items, s.items, static_cast<uint32_t>(kThreads));
    }
    __syncthreads();
  }
  if (take > 0) SortItemsDescending(s, selection, take);  // ends with a barrier

  // 4. A row's indices (through the map) and -1 padding, or a segment's candidates.
  if (segmented) {
    const int64_t cand_base = r * seg.count * p.k + sg * p.k;
    for (int j = t; j < take; j += kThreads) {
      const unsigned long long item = s.items[j];
      seg.cand_index[cand_base + j] = static_cast<int32_t>(off + ItemPosition(item));
      seg.cand_score[cand_base + j] = KeyValue(static_cast<uint32_t>(item >> 32));
    }
    if (sg == 0 && t == 0) {
      seg.cand_len[r] = SegmentCandidates(p, seg, r);
    }
  } else {
    int32_t* out = p.out + r * p.out_stride;
    for (int j = t; j < p.k; j += kThreads) {
      int32_t x = -1;
      if (j < take) {
        x = ItemPosition(s.items[j]);
        if (seg.map != nullptr) x = seg.map[r * seg.map_width + x];
      }
      out[j] = x;
    }
  }
}

}  // namespace

Status LaunchTopKResident(const TopKParams& p, const Segments& seg, cudaStream_t stream) {
  if (p.k > kThreads || (seg.count == 1 && p.n > kResidentLen) ||
      (seg.count > 1 && seg.len != kResidentLen)) {
    return Status::Internal("TopK: the resident kernel takes k <= " + std::to_string(kThreads) +
                            " over at most " + std::to_string(kResidentLen) + " entries a row");
  }
  const int64_t blocks = p.rows * seg.count;  // one a row or segment
  if (blocks > 0x7FFFFFFF) return Status::InvalidArgument("TopK: more than 2^31 - 1 rows");
  if (blocks == 0) return Status::Ok();
  if (seg.map != nullptr) {
    TopKResidentKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, seg);
  } else {
    TopKResidentKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, seg);
  }
  return NW_CUDA_LAUNCH_STATUS("TopKResidentKernel");
}

}  // namespace nw::cuda::topk_detail
