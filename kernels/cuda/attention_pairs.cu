// Sparse attention on Hopper's wgmma with a producer warpgroup (see attention.h): head_dim 512,
// bf16 q, bf16 KV or V4 fp8 KV (448 e4m3 dims with ue8m0 scales a 64, then 64 bf16 rope dims),
// one query per block of three warpgroups. The query's 64 (zero-padded) heads are the M = 64 rows
// of every wgmma.
//
// Warpgroup 2 (the producer, few registers) looks the entries up and fills two 64-entry buffers
// of whole bf16 rows (512 dims, 128-byte swizzled), each buffer in a left (dims 0 .. 255) and a
// right half with its own "ready" and "free" mbarriers. bf16 rows are copied by cp.async
// (.L2::256B), completing on "ready" by cp.async.mbarrier.arrive, so no consumer waits on a copy
// it did not need; V4 fp8 rows are copied raw (cp.async) into the upper atoms of their own
// buffer half as soon as it is free, then widened there to bf16 (exact) by the producer. Tiles go
// in pairs: tile 2 b into buffer 0, tile 2 b + 1 into buffer 1.
//
// Warpgroups 0 and 1 (the consumers, many registers) each own a buffer for S and a half of the
// dims for O:
//   S_c = Q K_c^T over all 512 dims of buffer c's tile (32 wgmma m64n64k16);
//   softmax of the pair with one maximum: warpgroup 0 takes the maximum over its tile and the
//     running one, warpgroup 1 takes that and its tile's (both through shared memory), so P of
//     both tiles is relative to the pair's maximum (warpgroup 0 rescales its P once more);
//   O_c += P_c V_c (own tile, P from registers) and O_c += P_other V_c (the other tile, P
//     through shared memory), V_c being dims 256 c .. 256 c + 255 of the buffer's rows.
// So each warpgroup's tensor-core work is one S and two P V a pair, and while one warpgroup runs
// its softmax the other's MMAs keep the tensor cores busy. Per-thread accumulators: O 128, S 32.
// Deterministic run to run; within the tensor-core path's bound of the CPU's.
#include <type_traits>

#include "kernels/cuda/attention_impl.cuh"
#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma.cuh"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 384;
constexpr int kDim = 512;
constexpr int kEntries = 64;  // entries a tile
constexpr int kHeads = 64;
constexpr int kAtoms = kDim / 64;               // 128-byte atoms along the dims
constexpr int kAtom = 64 * 128;                 // bytes of one atom of 64 rows
constexpr int kTileBytes = kAtoms * kAtom;      // 64 KiB: 64 whole rows
constexpr int kHalfAtoms = kAtoms / 2;          // a half of the dims: 4 atoms
constexpr int kHalfBytes = kHalfAtoms * kAtom;  // 32 KiB
constexpr float kLog2e = 1.4426950408889634f;
// Registers a thread after the split. The block starts with 168 a thread (65,536 / 384, rounded
// down to 8), and setmaxnreg.inc waits until the producer's setmaxnreg.dec has given back enough:
// 2 x consumers + producer must stay within 3 x 168, or the consumers wait forever. The V4 fp8
// producer holds a batch of loads in registers, so the consumers give up 8 for it (they need 208
// without spilling).
constexpr int kLaunchRegs = 168;
constexpr int kConsumerRegs = 216, kProducerRegs = 72;
constexpr int kConsumerRegsV4 = 208, kProducerRegsV4 = 88;
static_assert(kLaunchRegs == 65536 / kThreads / 8 * 8);
static_assert(2 * kConsumerRegs + kProducerRegs <= 3 * kLaunchRegs);
static_assert(2 * kConsumerRegsV4 + kProducerRegsV4 <= 3 * kLaunchRegs);

// Named barriers between the consumer warpgroups (256 threads each).
constexpr int kBarMax0 = 1;  // warpgroup 0's pair maximum is in smax
constexpr int kBarMax1 = 2;  // warpgroup 1's (the pair's) maximum is in smax
constexpr int kBarP0 = 3;    // P of tile 2 b is in shared memory
constexpr int kBarP1 = 4;    // P of tile 2 b + 1 is in shared memory
constexpr int kBarSum = 5;   // the row sums are in ssum

struct PairsSmem {
  static constexpr size_t kQ = 0;                             // [8 atoms][64 heads x 128 B]
  static constexpr size_t kKv = kQ + kTileBytes;              // [2 buffers][8 atoms][64 x 128 B]
  static constexpr size_t kP = kKv + 2 * size_t{kTileBytes};  // bf16 [2][64 heads x 128 B], SW128
  static constexpr size_t kValid = kP + 2 * size_t{kAtom};    // uint64 [2]: live entries a buffer
  static constexpr size_t kMax = kValid + 2 * sizeof(uint64_t);        // float [64]
  static constexpr size_t kSum = kMax + kHeads * sizeof(float);        // float [2][64]
  static constexpr size_t kRing = kSum + 2 * kHeads * sizeof(float);   // V4Ptrs [3 pairs][128]
  static constexpr size_t kScale = kRing + 6 * size_t{kEntries} * 16;  // [4 halves][64 rows][8]
  static constexpr size_t kBar = kScale + 4 * size_t{kEntries} * 8;    // q, ready[4], free[4]
  static constexpr size_t kBytes = kBar + 9 * sizeof(uint64_t);
  static constexpr size_t kAlloc = kBytes + 1024;  // room to align the base to 1024
};
static_assert(PairsSmem::kAlloc <= 227 * 1024, "the H200's shared memory a block");

// Half h of buffer b is barrier index 2 b + h (h = 0: dims 0 .. 255).
constexpr int kLeft0 = 0, kRight0 = 1, kLeft1 = 2, kRight1 = 3;
// "ready" counts the 128 producer threads' cp.async arrivals and one plain arrival of each
// producer warp's lane 0, which publishes the buffer's live-entry bits.
constexpr uint32_t kReadyCount = 128 + 4;

using RowPtr = const unsigned char*;

// Query i's q into sq (8 SW128 atoms of 64 heads, zero rows past n_heads) by the producer's 128
// threads (`tid`), completing on `qbar`.
__device__ __forceinline__ void CopyQ(const SparseAttentionParams& p, int64_t i, int tid,
                                      unsigned char* sq, uint64_t* qbar) {
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + i * p.n_heads * kDim;
#pragma unroll 4
  for (int k = 0; k < kHeads * kDim / 8 / 128; ++k) {
    const int idx = tid + 128 * k, h = idx >> 6, ch = idx & 63;
    const bool live = h < p.n_heads;
    CpAsync16(sq + (ch >> 3) * kAtom + SwizzledChunk(h, ch & 7), q + (live ? h : 0) * kDim + ch * 8,
              live);
  }
  CpAsyncMbarArriveNoinc(qbar);
}

// The producer warpgroup: Q, then every pair's rows (see the file comment).
__device__ __forceinline__ void ProducePairs(const SparseAttentionParams& p, int64_t i,
                                             int64_t len0, int64_t total, int64_t pairs,
                                             unsigned char* sq, unsigned char* skv, uint64_t* valid,
                                             uint64_t* qbar, uint64_t* ready, uint64_t* freed) {
  const int tid = threadIdx.x & 127, pw = tid >> 5, lane = threadIdx.x & 31;
  const int grp = lane >> 3, chunk = lane & 7;
  if (pairs == 0) return;
  CopyQ(p, i, tid, sq, qbar);
  // Lane l < 16 of warp pw looks up entry 16 pw + l of tile u (lanes 16 .. 31 repeat 0 .. 15).
  auto lookup = [&](int64_t u) -> RowPtr {
    const int64_t s = u * kEntries + 16 * pw + (lane & 15);
    if (s >= total) return nullptr;
    const Slot slot = SlotAt(p, i, len0, s);
    return slot.row >= 0 ? static_cast<RowPtr>(p.sets[slot.set].kv) + slot.row * (kDim * 2)
                         : nullptr;
  };
  const unsigned char* mapped = static_cast<const unsigned char*>(p.q);  // read by no zero fill
  // Half `half` of the rows looked up in `mine` into buffer `buffer`: group grp of 8 lanes copies
  // chunk `chunk` of every atom of rows 16 pw + grp + 4 lr, lr = 0 .. 3 (zeros for skipped
  // entries). `publish`: first write the buffer's live-entry bits.
  auto copy_half = [&](RowPtr mine, int buffer, int half, bool publish) {
    uint64_t* bar = &ready[2 * buffer + half];
    unsigned char* dst = skv + buffer * kTileBytes + half * kHalfBytes;
#pragma unroll
    for (int lr = 0; lr < 4; ++lr) {
      const int r = 16 * pw + grp + 4 * lr;
      const RowPtr row = reinterpret_cast<RowPtr>(
          __shfl_sync(kFullMask, reinterpret_cast<unsigned long long>(mine), grp + 4 * lr));
      const bool live = row != nullptr;
      const unsigned char* src = live ? row + half * kHalfAtoms * 128 + chunk * 16 : mapped;
      const uint32_t off = static_cast<uint32_t>(r * 128 + ((chunk ^ (r & 7)) << 4));
#pragma unroll
      for (int a = 0; a < kHalfAtoms; ++a) {
        CpAsync16L2Prefetch256(dst + a * kAtom + off, src + a * 128, live);
      }
    }
    CpAsyncMbarArriveNoinc(bar);
    const unsigned bits = __ballot_sync(kFullMask, mine != nullptr) & 0xFFFFu;
    if (lane == 0) {
      if (publish) reinterpret_cast<uint16_t*>(valid + buffer)[pw] = static_cast<uint16_t>(bits);
      MbarArrive(bar);
    }
  };
  RowPtr cur0 = lookup(0), cur1 = lookup(1);
  for (int64_t b = 0; b < pairs; ++b) {
    // The next pair's lookups are in flight while this pair waits for its buffers.
    const RowPtr next0 = lookup(2 * b + 2), next1 = lookup(2 * b + 3);
    const uint32_t parity = static_cast<uint32_t>((b & 1) ^ 1);
    MbarWait(&freed[kLeft0], parity);
    copy_half(cur0, 0, 0, true);
    MbarWait(&freed[kRight1], parity);
    copy_half(cur1, 1, 1, true);
    MbarWait(&freed[kRight0], parity);
    copy_half(cur0, 0, 1, false);
    MbarWait(&freed[kLeft1], parity);
    copy_half(cur1, 1, 0, false);
    cur0 = next0;
    cur1 = next1;
  }
  CpAsyncWaitAll();  // no copy outlives the block
}

// V4 fp8 rows: an entry's token bytes (448 e4m3 codes, then 64 bf16 rope values) and its 8-byte
// word of ue8m0 scales (7 used); data null for a skipped entry.
struct V4Ptrs {
  const uint8_t* data;
  const uint8_t* scales;
};

// A V4 fp8 half is staged raw in its own buffer: the e4m3 pieces (16 codes each) of its 64 rows
// go to the atoms from kStageLeft (left half: pieces 0 .. 15 in atoms 2, 3) or kStageRight (right
// half: pieces 16 .. 27 in atoms 5, 6), eight pieces an atom, piece k of row r at chunk
// (k % 8) ^ (r % 8) of the atom's row r, the swizzle of the bf16 rows (a warp's reads of one piece
// of 32 rows hit every bank group evenly). Widening writes the atoms below the staging first,
// then each staging atom once every raw piece in it has been read (see WidenHalfV4).
constexpr int kStageLeft = 2, kStageRight = 5;

// The producer's order of a pair's halves: K0 left, K1 right, K0 right, K1 left (s = 0 .. 3).
__device__ __forceinline__ int HalfBuffer(int s) { return s & 1; }
__device__ __forceinline__ int HalfSide(int s) { return (s == 1 || s == 2) ? 1 : 0; }

// Starts half kHalf of the tile whose entries are `rows` toward buffer `buf` (the half must be
// free): its e4m3 pieces to the staging atoms and, for the right half, its rope pieces straight
// to atom 7, by cp.async (zeros for skipped entries), and each row's scale word to `scale`
// (64 x 8 bytes); one commit group. Lane l of warp pw copies row r = 16 pw + l / 2, pieces
// 2 kk + l % 2 (two lanes a 32-byte sector), so each lane reads its row's pointer once and the
// swizzled destinations are a base plus one of four offsets plus a constant.
template <int kHalf>
__device__ __forceinline__ void IssueHalfV4(const V4Ptrs* rows, unsigned char* buf,
                                            unsigned char* scale, const void* mapped, int pw,
                                            int lane) {
  constexpr int kPairs = kHalf == 0 ? 8 : 10;  // piece pairs of the row this half copies
  constexpr int kStaged = kHalf == 0 ? 8 : 6;  // of them e4m3 (the rest rope)
  constexpr int kFirstByte = kHalf == 0 ? 0 : 256;
  const int r = 16 * pw + (lane >> 1), h = lane & 1, sw = r & 7;
  const V4Ptrs e = rows[r];
  const bool live = e.data != nullptr;
  // Piece 2 kk + h of the row lands in atom kk / 4 of the staging (or atom 7 for rope pieces), at
  // chunk (2 kk + h) % 8 ^ sw: byte 32 ((kk % 4) ^ (sw / 2)) + 16 (h ^ sw % 2) of the row.
  const int hh = (h ^ sw) & 1, s2 = sw >> 1;
  const uint32_t stage =
      SmemAddress(buf + (kHalf == 0 ? kStageLeft : kStageRight) * kAtom + r * 128 + 16 * hh);
  const uint32_t rope = SmemAddress(buf + 7 * kAtom + r * 128 + 16 * hh);
  const unsigned char* src =
      live ? e.data + kFirstByte + 16 * h : static_cast<const uint8_t*>(mapped);
  const int step = live ? 32 : 0;
#pragma unroll
  for (int kk = 0; kk < kPairs; ++kk) {
    const int j = kk < kStaged ? kk : kk - kStaged;
    const uint32_t dst = (kk < kStaged ? stage : rope) + 32 * ((j & 3) ^ s2) + kAtom * (j >> 2);
    CpAsync16(dst, src + step * kk, live);
  }
  if (h == 0) CpAsync8(scale + r * 8, live ? e.scales : mapped, live);
  CpAsyncCommit();
}

// Widens half kHalf of buffer `buf` from its staging (see IssueHalfV4, whose copies every producer
// thread has waited for before `NamedBarrierSync`) into the swizzled bf16 rows. Thread (r, j) =
// (tid % 64, tid / 64) takes row r, in three runs of one scale block each:
//   left:  pieces 4 j .. 4 j + 3 (staging atom 2 -> atoms 0, 1), 8 + 2 j, 9 + 2 j (atom 3 ->
//          atom 2, whose raw pieces were all read before the first barrier), 12 + 2 j, 13 + 2 j
//          (atom 3 -> atom 3: read, barrier, written);
//   right: pieces 16 + 2 j, 17 + 2 j (atom 5 -> atom 4), 24 + 2 j, 25 + 2 j (atom 6 -> atom 6:
//          read, barrier, written), 20 + 2 j, 21 + 2 j (atom 5 -> atom 5: read, barrier, written).
// A run's scale picks the bit path (WidenE4m3x16) or, for the rare scales outside it,
// DequantE4m3x16. At most two raw pieces are held across a barrier.
template <int kHalf>
__device__ __forceinline__ void WidenHalfV4(unsigned char* buf, const unsigned char* scale,
                                            int tid) {
  constexpr int kBase = kHalf == 0 ? 0 : 16;  // the half's first piece
  const int r = tid & 63, j = tid >> 6, sw = r & 7;
  const unsigned char* stage = buf + (kHalf == 0 ? kStageLeft : kStageRight) * kAtom + r * 128;
  const uint2 scw = *reinterpret_cast<const uint2*>(scale + r * 8);
  auto load = [&](int k) {
    const int kl = k - kBase;
    return *reinterpret_cast<const uint4*>(stage + (kl >> 3) * kAtom + (((kl & 7) ^ sw) << 4));
  };
  // Pieces k0 .. k0 + kCount - 1 (one scale block) from v into their bf16 chunks.
  auto store = [&](const uint4* v, int k0, auto count) {
    constexpr int kCount = decltype(count)::value;
    const int blk = k0 >> 2;
    const uint32_t sb = ((blk < 4 ? scw.x : scw.y) >> (8 * (blk & 3))) & 0xFFu;
    unsigned char* at = buf + blk * kAtom + r * 128;
    auto put = [&](int n, const uint4& lo, const uint4& hi) {
      const int cc = 2 * ((k0 + n) & 3);
      *reinterpret_cast<uint4*>(at + ((cc ^ sw) << 4)) = lo;
      *reinterpret_cast<uint4*>(at + (((cc + 1) ^ sw) << 4)) = hi;
    };
    if (E4m3BitPathScale(sb)) {
      const uint32_t mul2 = E4m3BitPathMultiplier(sb);
#pragma unroll
      for (int n = 0; n < kCount; ++n) {
        uint4 lo, hi;
        WidenE4m3x16(v[n], mul2, lo, hi);
        put(n, lo, hi);
      }
    } else {
      const float s = quant::DecodeUe8m0(static_cast<uint8_t>(sb));
#pragma unroll
      for (int n = 0; n < kCount; ++n) {
        uint4 lo, hi;
        DequantE4m3x16(v[n], s, lo, hi);
        put(n, lo, hi);
      }
    }
  };
  using Two = std::integral_constant<int, 2>;
  // A run with no hazard, its pieces at once (one scale test a run, the loads and the widening
  // interleaved: 2-3 % faster than a piece at a time, session 23 call 9).
  auto run_free = [&](int k0, int count) {
    if (count == 4) {
      const uint4 v[4] = {load(k0), load(k0 + 1), load(k0 + 2), load(k0 + 3)};
      store(v, k0, std::integral_constant<int, 4>{});
    } else {
      const uint4 v[2] = {load(k0), load(k0 + 1)};
      store(v, k0, Two{});
    }
  };
  // A run into the atom it is read from: both pieces read, the barrier, then written.
  auto run_in_place = [&](int k0) {
    const uint4 v[2] = {load(k0), load(k0 + 1)};
    NamedBarrierSync(7, 128);
    store(v, k0, Two{});
  };
  if constexpr (kHalf == 0) {
    run_free(4 * j, 4);
    NamedBarrierSync(7, 128);  // staging atom 2 is read
    run_free(8 + 2 * j, 2);
    run_in_place(12 + 2 * j);
  } else {
    run_free(16 + 2 * j, 2);
    run_in_place(24 + 2 * j);
    run_in_place(20 + 2 * j);
  }
}

// The producer warpgroup for V4 fp8 KV (head_dim 512, rope 64): the halves in ProducePairs'
// order, each copied raw into its own buffer by cp.async as soon as it is free (IssueHalfV4), then
// widened there to bf16 by the producer's threads (WidenHalfV4), which arrive on "ready" (count
// 128; lane 0 of each warp publishes the live-entry bits first). The next half's copies are
// started before a half is widened whenever that half is already free, so a half's load latency
// hides behind the previous half's widening. Entries' pointers pass through a shared-memory ring
// of three pairs (written a pair ahead, when the rows are also prefetched into L2), so a ring slot
// is never rewritten while a slower producer thread may still read it.
__device__ __forceinline__ void ProducePairsV4(const SparseAttentionParams& p, int64_t i,
                                               int64_t len0, int64_t total, int64_t pairs,
                                               unsigned char* smem) {
  // Everything at constant offsets from one base (fewer live registers than a pointer each).
  using L = PairsSmem;
  unsigned char* sq = smem + L::kQ;
  unsigned char* skv = smem + L::kKv;
  uint64_t* valid = reinterpret_cast<uint64_t*>(smem + L::kValid);
  V4Ptrs* ring = reinterpret_cast<V4Ptrs*>(smem + L::kRing);
  unsigned char* sscale = smem + L::kScale;
  uint64_t* qbar = reinterpret_cast<uint64_t*>(smem + L::kBar);
  uint64_t* ready = qbar + 1;
  uint64_t* freed = qbar + 5;
  const int tid = threadIdx.x & 127, pw = tid >> 5, lane = threadIdx.x & 31;
  if (pairs == 0) return;
  CopyQ(p, i, tid, sq, qbar);
  const V4KvLayout& l = p.kv_layout;
  const void* mapped = p.q;  // read by no zero fill
  // Lane l < 16 of warp pw looks up entry 16 pw + l of tile u: the index load now (only the
  // index is held, one register), the set, the range check and the row's addresses (a division
  // by the page size) when they are written to the ring.
  // (32-bit entry counts: PairsAttentionApplies keeps the two index widths below 2^30.)
  const int n0 = static_cast<int>(len0), n = static_cast<int>(total);
  auto entry = [&](int u) { return u * kEntries + 16 * pw + (lane & 15); };
  auto fetch = [&](int u) -> int32_t {
    const int s = entry(u);
    if (s >= n) return -1;
    const int set = s < n0 ? 0 : 1;
    const KvSet& ks = p.sets[set];
    return ks.indices[i * ks.index_stride + (set == 0 ? s : s - n0)];
  };
  auto resolve = [&](int u, int32_t idx) -> V4Ptrs {
    const int s = entry(u);
    const int set = s < n0 ? 0 : 1;
    if (s >= n || idx < 0 || idx >= p.sets[set].rows) return {nullptr, nullptr};
    const V4Row r = V4RowAt(p.sets[set].kv, l, idx);
    return {r.data, r.scales};
  };
  auto slot_of = [&](int u) { return ring + (u % 3) * 2 * kEntries; };
  // Ring slot u % 3 holds pair u's entries ([tile 2 u] then [tile 2 u + 1]).
  auto publish_pair = [&](int u, int32_t e0, int32_t e1) {
    V4Ptrs* slot = slot_of(u);
    const V4Ptrs a = resolve(2 * u, e0), b = resolve(2 * u + 1, e1);
    if (lane < 16) {
      slot[16 * pw + lane] = a;
      slot[kEntries + 16 * pw + lane] = b;
      // Line prefetches (a bulk prefetch takes a uniform address: a loop over the lanes).
#pragma unroll
      for (int off = 0; off < 576; off += 128) {
        if (a.data != nullptr) PrefetchL2Line(a.data + off);
        if (b.data != nullptr) PrefetchL2Line(b.data + off);
      }
      if (a.data != nullptr) PrefetchL2Line(a.scales);
      if (b.data != nullptr) PrefetchL2Line(b.scales);
    }
  };
  // Half q = 4 b + s of the sequence: pair b, the order's s-th half.
  auto issue = [&](int q) {
    const int b = q >> 2;
    const int s = q & 3, buffer = HalfBuffer(s), side = HalfSide(s);
    MbarWait(&freed[2 * buffer + side], static_cast<uint32_t>((b & 1) ^ 1));
    const V4Ptrs* rows = slot_of(b) + buffer * kEntries;
    unsigned char* buf = skv + buffer * kTileBytes;
    unsigned char* scale = sscale + (2 * buffer + side) * kEntries * 8;
    if (side == 0) {
      IssueHalfV4<0>(rows, buf, scale, mapped, pw, lane);
    } else {
      IssueHalfV4<1>(rows, buf, scale, mapped, pw, lane);
    }
  };
  auto widen = [&](int q, bool next_issued) {
    const int b = q >> 2;
    const int s = q & 3, buffer = HalfBuffer(s), side = HalfSide(s);
    if (next_issued) {
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    NamedBarrierSync(7, 128);  // every thread's copies of the half have landed
    unsigned char* buf = skv + buffer * kTileBytes;
    const unsigned char* scale = sscale + (2 * buffer + side) * kEntries * 8;
    if (side == 0) {
      WidenHalfV4<0>(buf, scale, tid);
    } else {
      WidenHalfV4<1>(buf, scale, tid);
    }
    FenceProxyAsync();  // these stores, for the consumers' wgmma reads
    // (Ring slot b is rewritten two pairs later, after this pair's widening by every thread.)
    const V4Ptrs* rows = slot_of(b) + buffer * kEntries;
    const bool mine = lane < 16 && rows[16 * pw + lane].data != nullptr;
    const unsigned bits = __ballot_sync(kFullMask, mine) & 0xFFFFu;
    if (lane == 0 && s < 2) {  // a buffer's first half publishes its live entries
      reinterpret_cast<uint16_t*>(valid + buffer)[pw] = static_cast<uint16_t>(bits);
    }
    MbarArrive(&ready[2 * buffer + side]);
  };
  publish_pair(0, fetch(0), fetch(1));
  int32_t ahead0 = fetch(2), ahead1 = fetch(3);  // pair 1's
  NamedBarrierSync(6, 128);                      // pair 0's ring slot is complete
  issue(0);
  const int npairs = static_cast<int>(pairs);  // at most 2^25: entries are two int32 lengths
  const int halves = 4 * npairs;
  for (int b = 0; b < npairs; ++b) {
    // Pair b + 1's slot is read from its first half's copies on, late in this pair (after the
    // barriers of this pair's widening); its rows go toward L2 now.
    if (b + 1 < npairs) publish_pair(b + 1, ahead0, ahead1);
    ahead0 = fetch(2 * b + 4);
    ahead1 = fetch(2 * b + 5);
#pragma unroll 1
    for (int s = 0; s < 4; ++s) {
      const int q = 4 * b + s;
      bool early = false;
      if (q + 1 < halves) {
        // The next half's copies go first when it is already free (a warp decides as one).
        const int sn = (q + 1) & 3;
        const uint32_t parity = static_cast<uint32_t>((((q + 1) >> 2) & 1) ^ 1);
        early = __shfl_sync(
            kFullMask, lane == 0 && MbarTest(&freed[2 * HalfBuffer(sn) + HalfSide(sn)], parity), 0);
        if (early) issue(q + 1);
      }
      widen(q, early);
      if (q + 1 < halves && !early) issue(q + 1);
    }
  }
  CpAsyncWaitAll();  // no copy outlives the block
}

// P (bf16 pairs) as the A fragments of the tile's four k16 steps.
__device__ __forceinline__ void PackP(const float (&s)[32], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = PackBf16x2(s[8 * kk], s[8 * kk + 1]);
    a[kk][1] = PackBf16x2(s[8 * kk + 2], s[8 * kk + 3]);
    a[kk][2] = PackBf16x2(s[8 * kk + 4], s[8 * kk + 5]);
    a[kk][3] = PackBf16x2(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// Stores A fragments of P into the SW128 K-major tile `sp` (64 heads x 64 entries, bf16): row r,
// entries 8 j + 2 t4 + {0, 1} at r * 128 + ((j ^ r % 8) * 16) + 4 t4 (a warp's stores hit 32
// distinct banks).
__device__ __forceinline__ void StoreP(unsigned char* sp, const uint32_t (&a)[4][4], int r0,
                                       int t4) {
  const int r1 = r0 + 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int j = 2 * kk;
    *reinterpret_cast<uint32_t*>(sp + r0 * 128 + ((j ^ (r0 & 7)) << 4) + 4 * t4) = a[kk][0];
    *reinterpret_cast<uint32_t*>(sp + r1 * 128 + ((j ^ (r1 & 7)) << 4) + 4 * t4) = a[kk][1];
    *reinterpret_cast<uint32_t*>(sp + r0 * 128 + (((j + 1) ^ (r0 & 7)) << 4) + 4 * t4) = a[kk][2];
    *reinterpret_cast<uint32_t*>(sp + r1 * 128 + (((j + 1) ^ (r1 & 7)) << 4) + 4 * t4) = a[kk][3];
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) SparseAttentionPairsKernel(SparseAttentionParams p) {
  using L = PairsSmem;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = Align1024(smem_raw);
  unsigned char* sq = smem + L::kQ;
  unsigned char* skv = smem + L::kKv;
  unsigned char* sp = smem + L::kP;
  uint64_t* valid = reinterpret_cast<uint64_t*>(smem + L::kValid);
  float* smax = reinterpret_cast<float*>(smem + L::kMax);
  float* ssum = reinterpret_cast<float*>(smem + L::kSum);
  uint64_t* qbar = reinterpret_cast<uint64_t*>(smem + L::kBar);
  uint64_t* ready = qbar + 1;  // [4]: 2 buffer + half
  uint64_t* freed = qbar + 5;  // [4]
  // The warpgroup, warp-uniform as far as the compiler knows (a shuffle from lane 0): wgmma in
  // code that looks divergent gets serialized.
  const int wg = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x >> 7), 0);
  const int tid = threadIdx.x & 127;
  const int64_t i = blockIdx.x;
  const int64_t len0 = SetLength(p.sets[0], i);
  const int64_t total = len0 + SetLength(p.sets[1], i);
  const int64_t pairs = (total + 2 * kEntries - 1) / (2 * kEntries);

  if (threadIdx.x == 0) {
    MbarInit(qbar, 128);
    for (int b = 0; b < 4; ++b) {
      MbarInit(&ready[b], kFp8 ? 128 : kReadyCount);
      MbarInit(&freed[b], 128);
    }
    MbarInitFence();
  }
  __syncthreads();
  if (wg == 2) {
    if constexpr (kFp8) {
      WarpgroupRegsDown<kProducerRegsV4>();
      ProducePairsV4(p, i, len0, total, pairs, smem);
    } else {
      WarpgroupRegsDown<kProducerRegs>();
      ProducePairs(p, i, len0, total, pairs, sq, skv, valid, qbar, ready, freed);
    }
    return;
  }
  if constexpr (kFp8) {
    WarpgroupRegsUp<kConsumerRegsV4>();
  } else {
    WarpgroupRegsUp<kConsumerRegs>();
  }

  const int c = wg, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int r0 = warp * 16 + g, r1 = r0 + 8;  // this thread's head rows
  float m0 = r0 < p.n_heads ? p.sink[r0] * kLog2e : 0.0f;
  float m1 = r1 < p.n_heads ? p.sink[r1] * kLog2e : 0.0f;
  // The sink's e^0 term (after the max shift) counts once, in warpgroup 0's row sums.
  float l0 = (c == 0 && m0 != -INFINITY) ? 1.0f : 0.0f;
  float l1 = (c == 0 && m1 != -INFINITY) ? 1.0f : 0.0f;
  const float scale2 = p.scale * kLog2e;
  const uint64_t dq = Sw128Desc(sq);
  const uint64_t dk = Sw128Desc(skv + c * kTileBytes);  // this warpgroup's S buffer
  // V of this warpgroup's dims in its own buffer (P from registers) and in the other's (P from
  // shared memory): MN-major, atoms kAtom apart along N.
  const uint64_t dv_own = Sw128Desc(skv + c * kTileBytes + c * kHalfBytes, kAtom, 1024);
  const uint64_t dv_other = Sw128Desc(skv + (1 - c) * kTileBytes + c * kHalfBytes, kAtom, 1024);
  unsigned char* sp_own = sp + c * kAtom;
  const uint64_t dp_other = Sw128Desc(sp + (1 - c) * kAtom);
  const uint64_t* live = valid + c;
  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float s[32];
  uint32_t a[4][4];

  // Atoms [a0, a0 + 4) of S's 32 k16 steps; the first of the tile overwrites.
  auto s_half = [&](int a0, bool first) {
#pragma unroll
    for (int k = 0; k < kHalfAtoms * 4; ++k) {
      const uint32_t off = static_cast<uint32_t>((a0 + k / 4) * kAtom + (k % 4) * 32);
      WgmmaM64N64K16Bf16(s, DescPlus(dq, off), DescPlus(dk, off), (first && k == 0) ? 0 : 1);
    }
  };
  // Waits for half `bar`'s rows. The wgmma fence after it is what ptxas would inject anyway
  // (accumulators of a chain continued past the wait loop); it waits for no MMA.
  auto wait_ready = [&](int bar, uint32_t parity) {
    MbarWait(&ready[bar], parity);
    FenceProxyAsync();  // the producer's cp.async writes, for this thread's wgmma reads
    WgmmaFence();
  };
  auto pv_own = [&]() {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaFenceOperands(a[kk]);
    WgmmaFenceOperands(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaM64N256K16Bf16RegA(o, a[kk], DescPlus(dv_own, kk * 2048));
    WgmmaCommit();
  };
  auto pv_other = [&]() {
    WgmmaFenceOperands(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      WgmmaM64N256K16Bf16<1>(o, DescPlus(dp_other, kk * 32), DescPlus(dv_other, kk * 2048), 1);
    }
    WgmmaCommit();
  };

  if (pairs > 0) {
    MbarWait(qbar, 0);
    FenceProxyAsync();
    if (c == 0) {  // tile 0's S; later pairs' are issued at the end of the previous pair
      WgmmaFenceOperands(s);
      wait_ready(kLeft0, 0);
      s_half(0, true);
      wait_ready(kRight0, 0);
      s_half(kHalfAtoms, false);
      WgmmaCommit();
      WgmmaWait<0>();
      WgmmaFenceOperands(s);
    }
  }
  for (int64_t b = 0; b < pairs; ++b) {
    const uint32_t parity = static_cast<uint32_t>(b & 1);
    if (c == 0) {
      float mx0, mx1;
      const uint64_t bits = *reinterpret_cast<volatile const uint64_t*>(live);
      ScaleMaskRowMax<8>(
          s, scale2, t4, [&](int e) { return ((bits >> e) & 1u) != 0; }, mx0, mx1);
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      SoftmaxStep(reinterpret_cast<float(&)[8][4]>(s), reinterpret_cast<float(&)[32][4]>(o), mn0,
                  mn1, m0, m1, l0, l1);
      if (t4 == 0) {
        smax[r0] = mn0;
        smax[r1] = mn1;
      }
      NamedBarrierArrive(kBarMax0, 256);
      PackP(s, a);
      pv_own();
      WgmmaWait<0>();
      WgmmaFenceOperands(o);
      MbarArrive(&freed[kLeft0]);  // S read both halves of buffer 0 before; P V the left one
      // The pair's maximum: rescale this tile's P (for warpgroup 1), O and the row sums.
      NamedBarrierSync(kBarMax1, 256);
      const float n0 = smax[r0], n1 = smax[r1];
      const float f0 = n0 == -INFINITY ? 1.0f : Exp2Approx(m0 - n0);
      const float f1 = n1 == -INFINITY ? 1.0f : Exp2Approx(m1 - n1);
      m0 = n0;
      m1 = n1;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s[4 * j] *= f0;
        s[4 * j + 1] *= f0;
        s[4 * j + 2] *= f1;
        s[4 * j + 3] *= f1;
      }
      PackP(s, a);
      StoreP(sp_own, a, r0, t4);
      FenceProxyAsync();
      NamedBarrierArrive(kBarP0, 256);
      l0 *= f0;
      l1 *= f1;
      if (__any_sync(kFullMask, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          o[4 * j] *= f0;
          o[4 * j + 1] *= f0;
          o[4 * j + 2] *= f1;
          o[4 * j + 3] *= f1;
        }
      }
      NamedBarrierSync(kBarP1, 256);
      pv_other();
      if (b + 1 < pairs) {
        // The next pair's S (tile 2 b + 2) behind this P V; buffer 1's left half is free once
        // P V retires.
        WgmmaFenceOperands(s);
        wait_ready(kLeft0, parity ^ 1);
        s_half(0, true);
        WgmmaCommit();
        WgmmaWait<1>();
        WgmmaFenceOperands(o);
        MbarArrive(&freed[kLeft1]);
        wait_ready(kRight0, parity ^ 1);
        s_half(kHalfAtoms, false);
        WgmmaCommit();
        WgmmaWait<0>();
        WgmmaFenceOperands(s);
      } else {
        WgmmaWait<0>();
        WgmmaFenceOperands(o);
        MbarArrive(&freed[kLeft1]);
      }
    } else {
      // S of tile 2 b + 1: the right half first (the producer's order).
      WgmmaFenceOperands(s);
      wait_ready(kRight1, parity);
      s_half(kHalfAtoms, true);
      wait_ready(kLeft1, parity);
      s_half(0, false);
      WgmmaCommit();
      WgmmaWait<0>();
      WgmmaFenceOperands(s);
      float mx0, mx1;
      const uint64_t bits = *reinterpret_cast<volatile const uint64_t*>(live);
      ScaleMaskRowMax<8>(
          s, scale2, t4, [&](int e) { return ((bits >> e) & 1u) != 0; }, mx0, mx1);
      NamedBarrierSync(kBarMax0, 256);
      const float mn0 = fmaxf(smax[r0], mx0), mn1 = fmaxf(smax[r1], mx1);
      __syncwarp();  // the quad has read smax before its lane 0 writes it
      SoftmaxStep(reinterpret_cast<float(&)[8][4]>(s), reinterpret_cast<float(&)[32][4]>(o), mn0,
                  mn1, m0, m1, l0, l1);
      if (t4 == 0) {
        smax[r0] = mn0;
        smax[r1] = mn1;
      }
      NamedBarrierArrive(kBarMax1, 256);
      PackP(s, a);
      pv_own();
      StoreP(sp_own, a, r0, t4);
      FenceProxyAsync();
      NamedBarrierSync(kBarP0, 256);
      pv_other();
      NamedBarrierArrive(kBarP1, 256);
      WgmmaWait<1>();
      MbarArrive(&freed[kRight1]);
      WgmmaWait<0>();
      WgmmaFenceOperands(o);
      MbarArrive(&freed[kRight0]);
    }
  }

  // Row sums of both warpgroups, added in the same order by both; then this warpgroup's dims.
  if (t4 == 0) {
    ssum[c * kHeads + r0] = l0;
    ssum[c * kHeads + r1] = l1;
  }
  NamedBarrierSync(kBarSum, 256);
  StoreOutputHalf512(p, i, c, r0, t4, o, 1.0f / (ssum[r0] + ssum[kHeads + r0]),
                     1.0f / (ssum[r1] + ssum[kHeads + r1]));
}

}  // namespace

bool PairsAttentionApplies(const SparseAttentionParams& p) {
  if (p.kv_format == KvFormat::kBf16) return WgmmaAttentionApplies(p);
  if (p.kv_format != KvFormat::kV4Fp8 || !p.q_bf16 || p.head_dim != kDim || p.n_heads > kHeads ||
      p.kv_layout.head_dim != kDim || p.kv_layout.rope_dim != 64 ||
      p.sets[0].index_stride + p.sets[1].index_stride >= (int64_t{1} << 30)) {
    return false;
  }
  return reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && p.m * p.n_heads < 0x7FFFFFFF;
}

Status LaunchSparseAttentionPairs(const SparseAttentionParams& p, cudaStream_t stream) {
  const bool fp8 = p.kv_format == KvFormat::kV4Fp8;
  auto kernel = fp8 ? SparseAttentionPairsKernel<true> : SparseAttentionPairsKernel<false>;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel),
                                              PairsSmem::kAlloc, "SparseAttentionPairsKernel"));
  kernel<<<static_cast<unsigned>(p.m), kThreads, PairsSmem::kAlloc, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("SparseAttentionPairsKernel");
}

}  // namespace nw::cuda::detail
