// Deterministic per-row top-k on the GPU; see topk.h.
#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/topk.h"
#include "kernels/cuda/topk_impl.cuh"

namespace nw::cuda {
namespace {

using namespace topk_detail;  // NOLINT(google-build-using-namespace): this file's own pieces

constexpr int kCandidates = 4096;  // entries of the first pass's threshold bin the fast path takes

struct TopKShared {
  uint32_t hist[kBins];
  uint32_t scan[kThreads];
  unsigned long long items[kMaxTopK];
  union {
    uint32_t cand[kCandidates];                // row positions in the first pass's threshold bin
    unsigned long long exchange[2][kThreads];  // the register sort's cross-warp stages
  };
  uint32_t warp_gt[kWarps];
  uint32_t warp_eq[kWarps];
  uint32_t key_min;  // a cached row's smallest and largest key
  uint32_t key_max;
  uint32_t bin;
  uint32_t above;
  uint32_t count;  // entries in bin
  uint32_t n_items;
  uint32_t n_cand;
};

/// Appends to cand (in no particular order) the positions of cache[0..n) whose key is at least
/// `lowest`. A lane reads four 16-byte words (16 keys) an iteration, consecutive lanes
/// consecutive words (the cache is allocated in whole words), and keeps its matches as a 16-bit
/// mask; a shuffle scan of the lanes' counts and one shared-memory atomic a warp place them, and
/// each lane writes its own positions from the mask's set bits. Only a warp's last iteration, when
/// it holds the row's end, checks bounds.
__device__ __forceinline__ void GatherFrom(const uint32_t* cache, int n, uint32_t lowest,
                                           uint32_t* count, uint32_t* cand) {
  constexpr int kWords = 4;                // 16-byte words a lane an iteration
  constexpr int kWarpWords = 32 * kWords;  // a warp's words an iteration (512 keys)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint4* cache4 = reinterpret_cast<const uint4*>(cache);
  const uint32_t count_addr = static_cast<uint32_t>(__cvta_generic_to_shared(count));
  auto iteration = [&](int w0, auto checked) {
    constexpr bool kChecked = decltype(checked)::value;
    uint32_t bits = 0;
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      const int w = w0 + 32 * j + lane;
      uint4 k = make_uint4(0u, 0u, 0u, 0u);
      if (!kChecked || 4 * w < n) k = cache4[w];
      const int i = 4 * w;
      bits |= static_cast<uint32_t>(k.x >= lowest && (!kChecked || i < n)) << (4 * j);
      bits |= static_cast<uint32_t>(k.y >= lowest && (!kChecked || i + 1 < n)) << (4 * j + 1);
      bits |= static_cast<uint32_t>(k.z >= lowest && (!kChecked || i + 2 < n)) << (4 * j + 2);
      bits |= static_cast<uint32_t>(k.w >= lowest && (!kChecked || i + 3 < n)) << (4 * j + 3);
    }
    const uint32_t mine = __popc(bits);
    uint32_t inclusive = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t v = __shfl_up_sync(detail::kFullMask, inclusive, o);
      if (lane >= o) inclusive += v;
    }
    const uint32_t total = __shfl_sync(detail::kFullMask, inclusive, 31);
    if (total == 0u) return;
    uint32_t base = 0;
    if (lane == 31) {
      // atom.shared directly: atomicAdd compiles into the compiler's own warp aggregation.
      asm volatile("atom.shared.add.u32 %0, [%1], %2;"
                   : "=r"(base)
                   : "r"(count_addr), "r"(total)
                   : "memory");
    }
    uint32_t at = __shfl_sync(detail::kFullMask, base, 31) + inclusive - mine;
    while (bits != 0u) {
      const int b = __ffs(bits) - 1;
      bits &= bits - 1u;
      cand[at++] = static_cast<uint32_t>(4 * (w0 + 32 * (b >> 2) + lane) + (b & 3));
    }
  };
  int w0 = warp * kWarpWords;
  for (; 4 * (w0 + kWarpWords) <= n; w0 += kWarps * kWarpWords) iteration(w0, std::false_type{});
  if (4 * w0 < n) iteration(w0, std::true_type{});
}

/// Sorts items[0..size) (size a power of two) descending with a bitonic network, thread t taking
/// compare-exchanges t, t + kThreads, ... of a stage. Exchanges of stride <= 16 stay inside 32-item
/// chunks whose exchanges the same warp's threads own in every stage, so between two such stages a
/// warp barrier suffices; the other stages end with a block barrier.
template <class T>
__device__ void BlockSortDescending(T* items, int size) {
  for (int block = 2; block <= size; block <<= 1) {
    for (int stride = block / 2; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < size / 2; t += kThreads) {
        const int i = (t / stride) * 2 * stride + (t % stride);
        const int j = i + stride;
        const bool leading = (i & block) == 0;
        const T a = items[i], b = items[j];
        if (leading ? a < b : a > b) {
          items[i] = b;
          items[j] = a;
        }
      }
      const int next = stride > 1 ? stride / 2 : block;  // the next stage's stride
      if (stride >= 32 || next >= 32) {
        __syncthreads();
      } else {
        __syncwarp();
      }
    }
  }
  __syncthreads();
}

struct WarpBarrier {
  __device__ void operator()() const { __syncwarp(); }
};

/// Sorts items[0..size) (size a power of two) with a bitonic network, descending or ascending:
/// the calling group's threads first, first + step, ... take the compare-exchanges of a stage,
/// and `barrier` (the warp's) separates the stages.
template <bool kDescending, class T, class Barrier>
__device__ void BitonicSort(T* items, int size, int first, int step, Barrier barrier) {
  for (int block = 2; block <= size; block <<= 1) {
    for (int stride = block / 2; stride > 0; stride >>= 1) {
      for (int t = first; t < size / 2; t += step) {
        const int i = (t / stride) * 2 * stride + (t % stride);
        const int j = i + stride;
        const bool leading = (i & block) == 0;  // sorted in the requested direction
        const T a = items[i], b = items[j];
        if (leading == kDescending ? a < b : a > b) {
          items[i] = b;
          items[j] = a;
        }
      }
      barrier();
    }
  }
}

/// Calls use(k, load(k)) for k = first, first + kThreads, ... below end, four loads in flight
/// before their uses.
template <class Load, class Use>
__device__ __forceinline__ void InBatchesOfFour(int k, int end, Load load, Use use) {
  for (; k + 3 * kThreads < end; k += 4 * kThreads) {
    decltype(load(k)) v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load(k + u * kThreads);
#pragma unroll
    for (int u = 0; u < 4; ++u) use(k + u * kThreads, v[u]);
  }
  for (; k < end; k += kThreads) use(k, load(k));
}

/// Stages the rank keys of row[0..n) in cache[0..n) and, with hist set, counts their top 11 bits
/// (the first radix pass) and folds them into this thread's smallest and largest key. Four
/// 16-byte loads a thread in flight where the row is 16-byte aligned, four 4-byte loads otherwise.
__device__ __forceinline__ void StageKeys(const float* row, int n, uint32_t* cache, uint32_t* hist,
                                          uint32_t& key_min, uint32_t& key_max) {
  auto key_of = [&](float v) {
    const uint32_t key = RankKey(v);
    if (hist != nullptr) {
      atomicAdd(&hist[key >> 21], 1u);
      key_min = min(key_min, key);
      key_max = max(key_max, key);
    }
    return key;
  };
  auto put = [&](int i, float v) { cache[i] = key_of(v); };
  auto put4 = [&](int j, float4 v) {
    reinterpret_cast<uint4*>(cache)[j] =
        make_uint4(key_of(v.x), key_of(v.y), key_of(v.z), key_of(v.w));
  };
  int done = 0;
  if ((reinterpret_cast<uintptr_t>(row) & 15u) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    InBatchesOfFour(
        threadIdx.x, n / 4, [&](int j) { return row4[j]; }, put4);
    done = n / 4 * 4;
  }
  InBatchesOfFour(
      done + threadIdx.x, n, [&](int i) { return row[i]; }, put);
}

// One block a row (or a segment of one). Rank keys are staged in shared memory when the row fits
// cache_len (the first radix pass counted while staging); a 3-pass radix select finds the key T
// of the take-th entry. Where the entries in and above the first pass's threshold bin fit
// kCandidates, they are gathered and the later passes and the selection use them alone (the
// selection then unordered); otherwise, or when only some entries equal to T are taken, an
// ordered compaction (each warp a contiguous run of 32-entry chunks, counted, then offset by the
// counts of the warps before it) keeps every key above T and the first need_eq entries equal to
// T, in index order. A bitonic sort puts a row's selection, and a gathered segment's, in rank
// order (a compacted segment's stays in index order).
__global__ void __launch_bounds__(kThreads, 2)
    TopKKernel(TopKParams p, int cache_len, Segments seg) {
  __shared__ TopKShared s;
  extern __shared__ uint4 cache_words[];
  uint32_t* cache = reinterpret_cast<uint32_t*>(cache_words);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned lanes_below = (1u << lane) - 1u;
  const bool segmented = seg.count > 1;
  for (int64_t q = blockIdx.x; q < p.rows * seg.count; q += gridDim.x) {
    const int64_t r = q / seg.count, sg = q % seg.count, off = sg * seg.len;
    const float* row = p.scores + r * p.stride + off;
    const int n = BlockLength(p, seg, r, off);
    const int take = min(p.k, n);
    const bool cached = n <= cache_len;
    const bool select = take > 0 && take < n;
    if (select) {
      for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
    }
    if (threadIdx.x == 0) {
      s.n_items = 0;
      s.n_cand = 0;
      s.key_min = 0xFFFFFFFFu;
      s.key_max = 0u;
    }
    __syncthreads();
    if (cached) {
      uint32_t lo = 0xFFFFFFFFu, hi = 0u;
      StageKeys(row, n, cache, select ? s.hist : nullptr, lo, hi);
      if (select) {
        lo = __reduce_min_sync(detail::kFullMask, lo);
        hi = __reduce_max_sync(detail::kFullMask, hi);
        if (lane == 0) {
          atomicMin(&s.key_min, lo);
          atomicMax(&s.key_max, hi);
        }
      }
    }
    __syncthreads();
    auto key_at = [&](int i) { return cached ? cache[i] : RankKey(row[i]); };

    // 1. The key T of the take-th entry and how many entries equal to T are selected, by a radix
    // select over key - key_min. Pass 0 counts the keys' top 11 bits (key_min 0; a cached row's
    // while staging). If a cached row then has too many entries in and above the threshold bin to
    // gather, and its keys span less than the whole key range (they crowd into a few of those
    // bins, as the second pass's candidates do, all near the top of their rows), pass 0 counts
    // again, from key_min = the row's smallest key: the 11 bits of key - key_min from `shift` up,
    // the highest that any entry has, so the 2,048 bins span the row's own range. Each later pass
    // counts the (up to) 11 bits below, down to bit 0. With the row cached and few enough entries
    // in or above pass 0's threshold bin, those are gathered, the later passes count only them,
    // and the selection is those at or above T, unless only some of the entries equal to T are
    // taken (then the ordered compaction below selects).
    uint32_t threshold = 0;
    uint32_t need_eq = static_cast<uint32_t>(n);
    bool gathered = false;  // items[0..take) hold the selection, in no particular order
    if (select) {
      uint32_t key_min = 0;
      int shift = 21;
      uint32_t remaining = static_cast<uint32_t>(take);
      if (!cached) {
        for (int i = threadIdx.x; i < n; i += kThreads) {
          atomicAdd(&s.hist[RankKey(row[i]) >> 21], 1u);
        }
        __syncthreads();
      }
      FindThresholdBin(s, remaining);
      if (cached && s.above + s.count > static_cast<uint32_t>(kCandidates)) {
        const int own = max(32 - __clz(static_cast<int>(s.key_max - s.key_min)) - 11, 0);
        if (own < 21) {  // the row's own range: every entry, (key - key_min) >> shift < 2,048
          key_min = s.key_min;
          shift = own;
          for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
          __syncthreads();
          auto count = [&](uint32_t key) { atomicAdd(&s.hist[(key - key_min) >> shift], 1u); };
          const uint4* cache4 = reinterpret_cast<const uint4*>(cache);
          for (int j = threadIdx.x; j < n / 4; j += kThreads) {
            const uint4 k = cache4[j];
            count(k.x);
            count(k.y);
            count(k.z);
            count(k.w);
          }
          for (int i = n / 4 * 4 + threadIdx.x; i < n; i += kThreads) count(cache[i]);
          __syncthreads();
          FindThresholdBin(s, remaining);
        }
      }
      uint32_t prefix = 0, mask = 0;
      uint32_t candidates = 0;  // positions gathered into s.cand (0: the passes read every entry)
      for (int pass = 0;; ++pass) {
        if (pass > 0) {
          for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
          __syncthreads();
          const uint32_t bins_mask = static_cast<uint32_t>(kBins - 1);
          auto count = [&](uint32_t key) {
            const uint32_t rel = key - key_min;
            if ((rel & mask) == prefix) atomicAdd(&s.hist[(rel >> shift) & bins_mask], 1u);
          };
          if (candidates > 0) {
            for (uint32_t j = threadIdx.x; j < candidates; j += kThreads) count(cache[s.cand[j]]);
          } else {
            for (int i = threadIdx.x; i < n; i += kThreads) count(key_at(i));
          }
          __syncthreads();
          FindThresholdBin(s, remaining);
        }
        remaining -= s.above;
        prefix |= s.bin << shift;
        mask |= static_cast<uint32_t>(kBins - 1) << shift;
        if (pass == 0 && cached && s.above + s.count <= static_cast<uint32_t>(kCandidates)) {
          candidates = s.above + s.count;  // the entries of bins >= the threshold bin
          GatherFrom(cache, n, key_min + (s.bin << shift), &s.n_cand, s.cand);
        }
        __syncthreads();  // s.bin / s.above / s.count are rewritten by the next pass
        if (shift == 0) break;
        const int next = max(shift - 11, 0);
        shift = next;
      }
      threshold = key_min + prefix;
      if (candidates > 0 && s.count == remaining) {  // every entry equal to T is taken
        for (uint32_t base = warp * 32; base < candidates; base += kThreads) {
          const uint32_t j = base + lane;
          const uint32_t i = j < candidates ? s.cand[j] : 0u;
          const uint32_t key = j < candidates ? cache[i] : 0u;
          WarpAppend(j < candidates && key >= threshold, RankItem(key, i), &s.n_items, s.items,
                     kMaxTopK);
        }
        gathered = true;
      }
      need_eq = remaining;
    }

    // 2. Ordered compaction: keys above T, and the first need_eq entries equal to T.
    const int64_t cand_base = segmented ? r * seg.count * p.k + sg * p.k : 0;
    if (!gathered) {
      const int chunks = (n + 31) / 32;
      const int c0 = warp * chunks / kWarps, c1 = (warp + 1) * chunks / kWarps;
      uint32_t n_gt = 0, n_eq = 0;
      if (take > 0) {
        for (int c = c0; c < c1; ++c) {
          const int i = c * 32 + lane;
          const uint32_t key = i < n ? key_at(i) : 0u;
          n_gt += __popc(__ballot_sync(detail::kFullMask, i < n && key > threshold));
          n_eq += __popc(__ballot_sync(detail::kFullMask, i < n && key == threshold));
        }
      }
      if (lane == 0) {
        s.warp_gt[warp] = n_gt;
        s.warp_eq[warp] = n_eq;
      }
      __syncthreads();
      if (take > 0) {
        uint32_t gt_before = 0, eq_before = 0;
        for (int w = 0; w < warp; ++w) {
          gt_before += s.warp_gt[w];
          eq_before += s.warp_eq[w];
        }
        uint32_t slot = gt_before + min(eq_before, need_eq);
        for (int c = c0; c < c1; ++c) {
          const int i = c * 32 + lane;
          const uint32_t key = i < n ? key_at(i) : 0u;
          const bool eq = i < n && key == threshold;
          const unsigned eq_mask = __ballot_sync(detail::kFullMask, eq);
          const bool sel = (i < n && key > threshold) ||
                           (eq && eq_before + __popc(eq_mask & lanes_below) < need_eq);
          const unsigned sel_mask = __ballot_sync(detail::kFullMask, sel);
          const uint32_t at = slot + __popc(sel_mask & lanes_below);
          if (sel && at < static_cast<uint32_t>(take)) {  // always true; guards a logic error
            if (segmented) {
              seg.cand_index[cand_base + at] = static_cast<int32_t>(off + i);
              seg.cand_score[cand_base + at] = KeyValue(key);
            } else {
              s.items[at] = RankItem(key, i);
            }
          }
          slot += __popc(sel_mask);
          eq_before += __popc(eq_mask);
        }
      }
    }
    if (segmented && sg == 0 && threadIdx.x == 0) {
      seg.cand_len[r] = SegmentCandidates(p, seg, r);
    }
    if (segmented && !gathered) {
      __syncthreads();  // the cache is reused by the next segment
      continue;
    }

    // 3. Rank order (a gathered segment's too: its candidates then keep equal keys in index
    // order, as the second pass's lower-position tie-break needs), then the indices (through the
    // map) and the -1 padding, or a segment's candidates.
    int size = 1;
    while (size < take) size <<= 1;
    for (int j = take + threadIdx.x; j < size; j += kThreads) s.items[j] = 0ull;
    __syncthreads();
    if (take > 1) {
      if (size <= kThreads) {
        RegisterSortDescending(s.items, size, s.exchange);
      } else {
        BlockSortDescending(s.items, size);
      }
    }
    if (segmented) {
      for (int j = threadIdx.x; j < take; j += kThreads) {
        const unsigned long long item = s.items[j];
        seg.cand_index[cand_base + j] =
            static_cast<int32_t>(off + (0xFFFFFFFFu - static_cast<uint32_t>(item)));
        seg.cand_score[cand_base + j] = KeyValue(static_cast<uint32_t>(item >> 32));
      }
      __syncthreads();  // items and the cache are reused by the next segment
      continue;
    }
    int32_t* out = p.out + r * p.out_stride;
    for (int j = threadIdx.x; j < p.k; j += kThreads) {
      int32_t v = -1;
      if (j < take) {
        v = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(s.items[j]));
        if (seg.map != nullptr) v = seg.map[r * seg.map_width + v];
      }
      out[j] = v;
    }
    __syncthreads();  // items and the cache are reused by the next row
  }
}

// ---- Many short rows, small k: one warp per row ---------------------------------------------
// The block kernel spends most of a 4,096-entry row on barriers and on shared-memory atomics that
// all hit the few bins of the top key bits. Here a warp takes a row with no block barriers:
//   1. the finite minimum and maximum of the row;
//   2. a 256-bin histogram of the row's values on a linear scale between them (bins are a
//      monotone function of the rank order: NaN, -inf and the minimum in bin 0, +inf in 255);
//   3. the threshold bin T; if the entries above T plus those in T fit the warp's candidate
//      buffer, they are gathered and sorted by (key, lower index) and the first k taken;
//   4. otherwise the search narrows to T's key interval (its entries' smallest and largest keys)
//      and repeats with bins linear in the key; an interval of one key is a tie, resolved in index
//      order by ballots.
// The result is the same total order as the block kernel's, so the same indices.
constexpr int kWarpRowsPerBlock = 8;
constexpr int kWarpBins = 256;
constexpr int kWarpCandidates = 256;  // >= kTopKWarpMaxK
static_assert(kWarpCandidates >= kTopKWarpMaxK);

struct WarpTopKShared {
  uint32_t hist[kWarpBins];
  unsigned long long items[kWarpCandidates];
  uint32_t count;
};

/// Calls f(i, v) for every entry of the row: 16-byte loads of four entries a lane where the row
/// starts 16-byte aligned, the rest one entry a lane. f must not use warp collectives (lanes run
/// different trip counts in the tail).
template <class F>
__device__ __forceinline__ void ForEachEntry(const float* row, int64_t len, int lane, F&& f) {
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(row) & 15u) == 0) {
    done = len / 128 * 128;
#pragma unroll 2
    for (int64_t base = 0; base < done; base += 128) {
      const int64_t i = base + 4 * lane;
      const float4 v = *reinterpret_cast<const float4*>(row + i);
      f(i, v.x);
      f(i + 1, v.y);
      f(i + 2, v.z);
      f(i + 3, v.w);
    }
  }
  for (int64_t i = done + lane; i < len; i += 32) f(i, row[i]);
}

// Bins of one search level: by value between flo and flo + 256 / fscale (level 0), or linear in
// the key over [klo, klo + kwidth) (the narrowed levels).
struct WarpBinner {
  bool by_value = true;
  float flo = 0.0f;
  float fscale = 0.0f;
  uint32_t klo = 0;
  uint32_t khi = 0xFFFFFFFFu;
  unsigned long long kwidth = 1ull << 32;
  __device__ __forceinline__ bool InRange(uint32_t key) const {
    return by_value || (key >= klo && key <= khi);
  }
  __device__ __forceinline__ bool Above(uint32_t key) const { return !by_value && key > khi; }
  __device__ __forceinline__ int Bin(float v, uint32_t key) const {
    if (by_value) {
      if (!(v > flo)) return 0;  // NaN, -inf, the minimum
      const float t = __fmul_rn(__fsub_rn(v, flo), fscale);
      return t < static_cast<float>(kWarpBins - 1) ? static_cast<int>(t) : kWarpBins - 1;
    }
    return static_cast<int>(static_cast<unsigned long long>(key - klo) * kWarpBins / kwidth);
  }
};

__global__ void __launch_bounds__(kWarpRowsPerBlock * 32) TopKWarpKernel(TopKParams p) {
  __shared__ WarpTopKShared shared[kWarpRowsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  WarpTopKShared& s = shared[warp];
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + warp; r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * kWarpRowsPerBlock) {
    const float* row = p.scores + r * p.stride;
    int32_t* out = p.out + r * p.out_stride;
    int64_t len = p.n;
    if (p.lengths != nullptr) len = min(max(static_cast<int64_t>(p.lengths[r]), int64_t{0}), p.n);
    const int take = static_cast<int>(min(static_cast<int64_t>(p.k), len));

    // Gathers the entries `pick` selects into items[0..) in index order; returns the count.
    // Gathers the entries `pick` selects into items[0..) (in no particular order: the sort
    // below orders them by key and index); returns the count.
    auto gather = [&](auto pick) {
      if (lane == 0) s.count = 0;
      __syncwarp();
      ForEachEntry(row, len, lane, [&](int64_t i, float v) {
        const uint32_t key = RankKey(v);
        if (pick(v, key)) s.items[atomicAdd(&s.count, 1u)] = RankItem(key, i);
      });
      __syncwarp();
      return s.count;
    };

    uint32_t count = 0;  // candidates gathered into items
    if (take > 0 && take == len) {
      count = gather([](float, uint32_t) { return true; });
    } else if (take > 0) {
      // 1. Finite range of the row.
      float lo = INFINITY, hi = -INFINITY;
      ForEachEntry(row, len, lane, [&](int64_t, float v) {
        if (isfinite(v)) {
          lo = fminf(lo, v);
          hi = fmaxf(hi, v);
        }
      });
      for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(detail::kFullMask, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(detail::kFullMask, hi, o));
      }
      WarpBinner bins;
      bins.flo = lo;
      bins.fscale = hi > lo ? __fdiv_rn(static_cast<float>(kWarpBins), __fsub_rn(hi, lo)) : 0.0f;
      if (!isfinite(bins.fscale)) bins.fscale = 3.0e38f;
      uint32_t remaining = static_cast<uint32_t>(take);  // still to pick inside the range
      for (;;) {
        // 2. Histogram of the entries in range.
        for (int b = lane; b < kWarpBins; b += 32) s.hist[b] = 0;
        __syncwarp();
        ForEachEntry(row, len, lane, [&](int64_t, float v) {
          const uint32_t key = RankKey(v);
          if (bins.InRange(key)) atomicAdd(&s.hist[bins.Bin(v, key)], 1u);
        });
        __syncwarp();
        // 3. Threshold bin: lane l owns bins 8l .. 8l + 7.
        uint32_t mine[kWarpBins / 32], local = 0;
#pragma unroll
        for (int j = 0; j < kWarpBins / 32; ++j) {
          mine[j] = s.hist[lane * (kWarpBins / 32) + j];
          local += mine[j];
        }
        uint32_t suffix = local;  // entries in this lane's bins and above
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const uint32_t v = __shfl_down_sync(detail::kFullMask, suffix, o);
          if (lane + o < 32) suffix += v;
        }
        uint32_t above = suffix - local, t_bin = 0, t_above = 0, t_count = 0;
        bool found = false;
#pragma unroll
        for (int j = kWarpBins / 32 - 1; j >= 0; --j) {
          if (!found && above < remaining && above + mine[j] >= remaining) {
            found = true;
            t_bin = static_cast<uint32_t>(lane * (kWarpBins / 32) + j);
            t_above = above;
            t_count = mine[j];
          }
          above += mine[j];
        }
        const int src = __ffs(__ballot_sync(detail::kFullMask, found)) - 1;
        t_bin = __shfl_sync(detail::kFullMask, t_bin, src);
        t_above = __shfl_sync(detail::kFullMask, t_above, src);
        t_count = __shfl_sync(detail::kFullMask, t_count, src);
        const int bin_t = static_cast<int>(t_bin);
        const uint32_t picked = static_cast<uint32_t>(take) - remaining;  // keys above the range
        if (picked + t_above + t_count <= static_cast<uint32_t>(kWarpCandidates)) {
          count = gather([&](float v, uint32_t key) {
            return bins.Above(key) || (bins.InRange(key) && bins.Bin(v, key) >= bin_t);
          });
          break;
        }
        // 4. Narrow to bin T's key interval.
        remaining -= t_above;
        uint32_t klo = 0xFFFFFFFFu, khi = 0;
        ForEachEntry(row, len, lane, [&](int64_t, float v) {
          const uint32_t key = RankKey(v);
          if (bins.InRange(key) && bins.Bin(v, key) == bin_t) {
            klo = min(klo, key);
            khi = max(khi, key);
          }
        });
        for (int o = 16; o > 0; o >>= 1) {
          klo = min(klo, __shfl_xor_sync(detail::kFullMask, klo, o));
          khi = max(khi, __shfl_xor_sync(detail::kFullMask, khi, o));
        }
        bins.by_value = false;
        bins.klo = klo;
        bins.khi = khi;
        bins.kwidth = static_cast<unsigned long long>(khi - klo) + 1ull;
        if (klo == khi) {
          // A tie: every key above it, then its first `remaining` entries in index order.
          uint32_t eq_before = 0;
          for (int64_t base = 0; base < len; base += 32) {
            const int64_t i = base + lane;
            const float v = i < len ? row[i] : 0.0f;
            const uint32_t key = RankKey(v);
            const bool gt = i < len && key > khi;
            const bool eq = i < len && key == khi;
            const unsigned eq_mask = __ballot_sync(detail::kFullMask, eq);
            const bool sel = gt || (eq && eq_before + __popc(eq_mask & lanes_below) < remaining);
            const unsigned mask = __ballot_sync(detail::kFullMask, sel);
            if (sel) s.items[count + __popc(mask & lanes_below)] = RankItem(key, i);
            count += __popc(mask);
            eq_before += __popc(eq_mask);
          }
          break;
        }
      }
    }
    // Rank order, then the indices and the -1 padding.
    int size = 1;
    while (size < static_cast<int>(count)) size <<= 1;
    for (int j = static_cast<int>(count) + lane; j < size; j += 32) s.items[j] = 0ull;
    __syncwarp();
    if (count > 1) BitonicSort<true>(s.items, size, lane, 32, WarpBarrier{});
    for (int j = lane; j < p.k; j += 32) {
      out[j] =
          j < take ? static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(s.items[j])) : -1;
    }
    __syncwarp();  // items are reused by the warp's next row
  }
}

/// Shared-memory bytes of a block kernel's key cache of `len` entries: whole 16-byte words, which
/// GatherBinsFrom reads.
size_t CacheBytes(int64_t len) { return static_cast<size_t>((len + 3) / 4) * 16; }

}  // namespace

Status LaunchTopK(const TopKParams& params, cudaStream_t stream) {
  TopKParams p = params;
  if (p.rows < 0 || p.n < 0 || p.n > 0x7FFFFFFF || p.k < 0 || p.k > kMaxTopK) {
    return Status::InvalidArgument(
        "TopK: need rows >= 0, 0 <= n < 2^31, 0 <= k <= " + std::to_string(kMaxTopK) + "; got n " +
        std::to_string(p.n) + ", k " + std::to_string(p.k));
  }
  if (p.rows == 0 || p.k == 0) return Status::Ok();
  if (p.out == nullptr || (p.n > 0 && p.scores == nullptr)) {
    return Status::InvalidArgument("TopK: null pointer");
  }
  if (p.stride == 0) p.stride = p.n;
  if (p.out_stride == 0) p.out_stride = p.k;
  if (p.stride < p.n || p.out_stride < p.k) {
    return Status::InvalidArgument("TopK: stride too small");
  }
  const bool warp_fits = p.k <= kTopKWarpMaxK && p.n <= kTopKCachedLen;
  if ((p.path == TopKPath::kWarpPerRow && !warp_fits) ||
      (p.path == TopKPath::kResident && p.k > kThreads)) {
    return Status::InvalidArgument("TopK: the forced kernel does not take k " +
                                   std::to_string(p.k) + " over rows of " + std::to_string(p.n));
  }
  // Many rows with a small k (prefill's selection over the compressed entries): a warp per row.
  if (p.path == TopKPath::kWarpPerRow ||
      (p.path == TopKPath::kAuto && warp_fits && (p.rows >= kTopKWarpMinRows || p.n <= 2048))) {
    const int64_t blocks = (p.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    TopKWarpKernel<<<static_cast<unsigned>(
                         std::clamp<int64_t>(blocks, 1, 64LL * MultiprocessorCount())),
                     kWarpRowsPerBlock * 32, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("TopKWarpKernel");
  }
  // k <= kThreads over at most kResidentLen entries: the resident kernel, entries in registers.
  const bool resident = p.k <= kThreads;
  if (resident && p.n <= kResidentLen) return LaunchTopKResident(p, Segments{}, stream);
  const int64_t cap = 8LL * MultiprocessorCount();
  if (!resident && p.n <= kTopKCachedLen) {
    const int cache_len = static_cast<int>(p.n);
    const size_t smem = CacheBytes(cache_len);
    NW_RETURN_IF_ERROR(
        AllowDynamicSharedMemory(reinterpret_cast<const void*>(&TopKKernel), smem, "TopKKernel"));
    TopKKernel<<<static_cast<unsigned>(std::clamp<int64_t>(p.rows, 1, cap)), kThreads, smem,
                 stream>>>(p, cache_len, Segments{});
    return NW_CUDA_LAUNCH_STATUS("TopKKernel");
  }
  // Longer rows: the top-k set of each kTopKSegment-entry segment (one block each) as candidates
  // in rank order, then the top-k over each row's candidates, mapped back to row indices.
  Segments seg;
  seg.count = (p.n + kTopKSegment - 1) / kTopKSegment;
  seg.len = kTopKSegment;
  const int64_t width = seg.count * p.k;
  if (p.rows * seg.count > 0x7FFFFFFF || width > 0x7FFFFFFF) {
    return Status::InvalidArgument("TopK: too many segments");
  }
  NW_ASSIGN_OR_RETURN(auto cand_index, DeviceBuffer<int32_t>::AllocateOn(
                                           static_cast<size_t>(p.rows * width), stream));
  NW_ASSIGN_OR_RETURN(auto cand_score,
                      DeviceBuffer<float>::AllocateOn(static_cast<size_t>(p.rows * width), stream));
  NW_ASSIGN_OR_RETURN(auto cand_len,
                      DeviceBuffer<int32_t>::AllocateOn(static_cast<size_t>(p.rows), stream));
  seg.cand_index = cand_index.data();
  seg.cand_score = cand_score.data();
  seg.cand_len = cand_len.data();
  if (resident) {
    NW_RETURN_IF_ERROR(LaunchTopKResident(p, seg, stream));
  } else {
    const int seg_cache = static_cast<int>(kTopKSegment);
    NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(&TopKKernel),
                                                CacheBytes(seg_cache), "TopKKernel"));
    TopKKernel<<<static_cast<unsigned>(std::clamp<int64_t>(p.rows * seg.count, 1, cap)), kThreads,
                 CacheBytes(seg_cache), stream>>>(p, seg_cache, seg);
    NW_RETURN_IF_ERROR(NW_CUDA_LAUNCH_STATUS("TopKKernel (segments)"));
  }
  TopKParams second = p;
  second.scores = cand_score.data();
  second.lengths = cand_len.data();
  second.n = width;
  second.stride = width;
  Segments map;
  map.map = cand_index.data();
  map.map_width = width;
  if (resident && width <= kResidentLen) return LaunchTopKResident(second, map, stream);
  const int second_cache = static_cast<int>(std::min(width, kTopKCachedLen));
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(&TopKKernel),
                                              CacheBytes(second_cache), "TopKKernel"));
  TopKKernel<<<static_cast<unsigned>(std::clamp<int64_t>(p.rows, 1, cap)), kThreads,
               CacheBytes(second_cache), stream>>>(second, second_cache, map);
  return NW_CUDA_LAUNCH_STATUS("TopKKernel (candidates)");
}

}  // namespace nw::cuda
