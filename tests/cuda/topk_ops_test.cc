// Per-row top-k against cpu::TopK: exact indices in rank order with -1 padding, on rows with
// heavy ties, NaN, infinities, signed zeros, ragged lengths (0 included), k > len, the shared-
// memory/global boundary, rows split into segments and rows of a million entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/topk.h"
#include "kernels/cuda/topk.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

/// Scores of one row, by kind: 0 uniform, 1 small integers (ties), 2 all equal, 3 with NaNs,
/// 4 infinities and signed zeros, 5 all NaN, 6 ascending, 7 descending, 8 values in [0, 1) with
/// rare +-1e30 outliers (a value histogram puts them all in one bin), 9 distinct values a few
/// ulps apart (1 + m 2^-23), 10 values in [96, 100) (a few bins of the keys' top bits hold them
/// all, as they hold a long row's candidates: the block kernel recounts over the row's own range).
void FillRow(float* row, int64_t n, int kind, Rng& rng) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < n; ++i) {
    float v = 0.0f;
    switch (kind) {
      case 0:
        v = rng.Uniform(-100.0f, 100.0f);
        break;
      case 1:
        v = static_cast<float>(rng.Int(0, 20));
        break;
      case 2:
        v = 1.5f;
        break;
      case 3:
        v = (rng.Next() % 5 == 0) ? nan : static_cast<float>(rng.Int(-3, 3));
        break;
      case 4: {
        const int64_t r = rng.Int(0, 5);
        v = r == 0   ? INFINITY
            : r == 1 ? -INFINITY
            : r == 2 ? -0.0f
            : r == 3 ? 0.0f
                     : rng.Uniform(-1.0f, 1.0f);
        break;
      }
      case 5:
        v = nan;
        break;
      case 6:
        v = static_cast<float>(i);
        break;
      case 8: {
        const int64_t r = rng.Int(0, 49);
        v = r == 0 ? 1e30f : r == 1 ? -1e30f : rng.Uniform(0.0f, 1.0f);
        break;
      }
      case 9:
        v = 1.0f + static_cast<float>(rng.Int(0, 600)) * 0x1p-23f;
        break;
      case 10:
        v = rng.Uniform(96.0f, 100.0f);
        break;
      default:
        v = static_cast<float>(n - i);
        break;
    }
    row[i] = v;
  }
}

constexpr int64_t kKinds = 11;  // FillRow's kinds

struct TopKCase {
  int64_t rows;
  int64_t n;
  int k;
  bool ragged;
  bool kind_per_segment = false;  // each kTopKSegment-entry stretch of a row its own kind
  bool aligned = false;           // rows 16-byte aligned (the 16-byte load path), else padded by 5
  TopKPath path = TopKPath::kAuto;
};

void RunTopK(const TopKCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "rows " << c.rows << " n " << c.n << " k " << c.k << " ragged " << c.ragged
               << " aligned " << c.aligned << " seed " << seed);
  Rng rng(seed);
  // Padded rows: the padding must never be read into results.
  const int64_t stride = c.aligned ? (c.n + 4) / 4 * 4 + 4 : c.n + 5;
  std::vector<float> scores(static_cast<size_t>(c.rows * stride), -1e30f);
  std::vector<int32_t> lengths(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) {
    if (c.kind_per_segment) {
      for (int64_t at = 0, sg = 0; at < c.n; at += kTopKSegment, ++sg) {
        FillRow(scores.data() + r * stride + at, std::min(kTopKSegment, c.n - at),
                static_cast<int>((r + sg + static_cast<int64_t>(seed)) % kKinds), rng);
      }
    } else {
      FillRow(scores.data() + r * stride, c.n,
              static_cast<int>((r + static_cast<int64_t>(seed)) % kKinds), rng);
    }
    int64_t len = c.n;
    if (c.ragged) {
      const int64_t pick = rng.Int(0, 5);
      len = pick == 0 ? 0 : pick == 1 ? c.n + 7 /* clamped to n */ : rng.Int(0, c.n);
    }
    lengths[static_cast<size_t>(r)] = static_cast<int32_t>(len);
  }
  const int64_t out_stride = c.k + 3;
  std::vector<int32_t> want(static_cast<size_t>(c.rows * c.k));
  std::vector<int32_t> scratch(static_cast<size_t>(c.n));
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t len = std::min<int64_t>(lengths[static_cast<size_t>(r)], c.n);
    cpu::TopK(scores.data() + r * stride, len, c.k, want.data() + r * c.k, scratch.data());
  }
  Guarded<float> ds(scores);
  Guarded<int32_t> dl(lengths), dout(static_cast<size_t>(c.rows * out_stride));
  TopKParams p;
  p.scores = ds.get();
  p.lengths = c.ragged ? dl.get() : nullptr;
  p.out = dout.get();
  p.rows = c.rows;
  p.n = c.n;
  p.stride = stride;
  p.k = c.k;
  p.out_stride = out_stride;
  p.path = c.path;
  NW_ASSERT_OK(LaunchTopK(p, nullptr));
  NW_ASSERT_SYNC();
  const std::vector<int32_t> out = dout.Download();
  std::vector<int32_t> got(want.size());
  for (int64_t r = 0; r < c.rows; ++r) {
    std::copy_n(out.begin() + r * out_stride, c.k, got.begin() + r * c.k);
    for (int64_t j = c.k; j < out_stride; ++j) {
      ASSERT_EQ(out[static_cast<size_t>(r * out_stride + j)], 0x7F7F7F7F) << "wrote past k";
    }
  }
  EXPECT_TRUE(SameInts(got, want));
  EXPECT_TRUE(dout.GuardsIntact());
  // Run to run: the same bits again.
  NW_ASSERT_OK(LaunchTopK(p, nullptr));
  NW_ASSERT_SYNC();
  EXPECT_TRUE(SameInts(dout.Download(), out)) << "run to run";
}

TEST(CudaTopK, SmallAndTileEdges) {
  NW_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const TopKCase& c : std::vector<TopKCase>{{1, 1, 1, false},
                                                 {8, 7, 8, false},    // k > n: -1 padding
                                                 {8, 64, 64, false},  // k == n
                                                 {8, 65, 64, false},
                                                 {8, 63, 64, false},
                                                 {16, 1000, 512, true},
                                                 {16, 4099, 512, true},
                                                 {9, 2049, 2048, false},
                                                 {4, 3, 1, true},
                                                 {5, 0, 4, false}}) {
    RunTopK(c, seed++);
  }
}

TEST(CudaTopK, ManyShortRowsOneWarpEach) {
  NW_REQUIRE_GPU();
  uint64_t seed = 30;
  // The warp-per-row kernel (k <= kTopKWarpMaxK and at least kTopKWarpMinRows rows, or rows of at
  // most 2,048 entries): every row kind, ragged lengths, bins narrowed by key (outliers, values a
  // few ulps apart) and ties larger than its candidate buffer (all equal, small integers).
  for (const TopKCase& c :
       std::vector<TopKCase>{{kTopKWarpMinRows, 4096, 64, true},
                             {kTopKWarpMinRows + 44, 8192, kTopKWarpMaxK, false},
                             {kTopKWarpMinRows, 257, 64, true},
                             {20, 2048, 64, true},  // few rows, short enough for a warp each
                             {20, 2049, 64, true},  // few rows, long: the block kernel
                             {kTopKWarpMinRows + 3, kTopKCachedLen, 100, true},
                             {512, 1000, 1, false},
                             {kTopKWarpMinRows, 130, kTopKWarpMaxK, true},
                             {kTopKWarpMinRows, 3000, kTopKWarpMaxK + 1, true}}) {  // block
    RunTopK(c, seed++);
  }
  // The same shapes forced onto the other kernel: the resident one takes the warp kernel's rows,
  // and the warp kernel takes few rows of more than 2,048 entries.
  for (TopKCase c : std::vector<TopKCase>{{kTopKWarpMinRows, 4096, 64, true},
                                          {kTopKWarpMinRows, 257, 64, true, false, true},
                                          {kTopKWarpMinRows + 3, kTopKCachedLen, 100, true}}) {
    c.path = TopKPath::kResident;
    RunTopK(c, seed++);
  }
  RunTopK({20, 5000, 64, true, false, false, TopKPath::kWarpPerRow}, seed++);
}

TEST(CudaTopK, ResidentRowsEveryKind) {
  NW_REQUIRE_GPU();
  uint64_t seed = 110;
  // The resident kernel (k <= 512, rows or segments of at most 16,384 entries): every row kind
  // (so the candidate gather after pass 0, the recount from global memory when the threshold bin
  // is crowded, ties resolved by position, and the bucket sort's bitonic fallback), 16-byte
  // aligned rows and padded ones, full rows, rows ending inside a 2,048-entry slice and inside a
  // 16-byte word, and k at 1, 511 and 512.
  for (const TopKCase& c : std::vector<TopKCase>{{22, 16384, 512, false, false, true},
                                                 {22, 16384, 512, false},
                                                 {22, 16383, 511, true, false, true},
                                                 {22, 2049, 512, true, false, true},
                                                 {22, 4097, 300, false},
                                                 {22, 12000, 1, true, false, true},
                                                 {11, 513, 512, false, false, true},
                                                 {11, 16384, 129, true}}) {
    RunTopK(c, seed++);
  }
  // Segments of the resident kernel whose candidates the resident kernel (width <= 16,384) or
  // the cached block kernel (wider) selects from; a row of 16,385 entries is two segments.
  for (const TopKCase& c : std::vector<TopKCase>{{8, 16385, 512, true, false, true},
                                                 {6, 262144, 512, false, true, true},
                                                 {4, 262144 + 3, 512, true, true},
                                                 {3, 33 * kTopKSegment, 512, false, true, true}}) {
    RunTopK(c, seed++);
  }
}

TEST(CudaTopK, CacheBoundaryAndLongRows) {
  NW_REQUIRE_GPU();
  uint64_t seed = 50;
  // Past kTopKCachedLen rows are split into kTopKSegment-entry segments: segment edges, a last
  // segment shorter than k, k = 1 and kMaxTopK, ragged rows ending inside any segment.
  for (const TopKCase& c : std::vector<TopKCase>{{8, kTopKCachedLen, 512, false},
                                                 {8, kTopKCachedLen + 1, 512, false},
                                                 {6, 100003, 2048, true},
                                                 {3, 3 * kTopKSegment + 5, 2048, true},
                                                 {24, 2 * kTopKSegment + 1, 64, true},
                                                 {2, 70000, 1, false},
                                                 {1, 300001, 64, true},
                                                 {3, 600001, 256, true}}) {
    RunTopK(c, seed++);
  }
}

TEST(CudaTopK, SegmentsOfDifferentKinds) {
  NW_REQUIRE_GPU();
  uint64_t seed = 70;
  // A row's segments each of its own kind: within one row some segments leave their candidates in
  // rank order (selected from the first pass's threshold bin) and some in index order (the
  // ordered compaction, for ties at the threshold), and equal keys (small integers, all equal)
  // recur across segments, so the second pass's tie-break must still pick the lowest indices.
  for (const TopKCase& c : std::vector<TopKCase>{{10, 4 * kTopKSegment + 100, 512, false, true},
                                                 {10, 3 * kTopKSegment, 2048, true, true},
                                                 {10, 5 * kTopKSegment - 3, 64, false, true}}) {
    RunTopK(c, seed++);
  }
}

TEST(CudaTopK, LargeMillionEntryRows) {
  NW_REQUIRE_GPU();
  uint64_t seed = 90;
  for (const TopKCase& c :
       std::vector<TopKCase>{{8, 1 << 20, 512, false}, {2, 1 << 20, 2048, false}}) {
    RunTopK(c, seed++);
  }
}

TEST(CudaTopK, RejectsBadParams) {
  TopKParams p;
  p.rows = 1;
  p.n = 10;
  p.k = kMaxTopK + 1;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.k = 4;
  p.stride = 5;
  float dummy = 0;
  int32_t out[4];
  p.scores = &dummy;
  p.out = out;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.stride = 0;  // a forced kernel outside its limits
  p.k = kTopKWarpMaxK + 1;
  p.path = TopKPath::kWarpPerRow;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.k = 513;
  p.path = TopKPath::kResident;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::cuda::testing
