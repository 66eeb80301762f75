// RoPE (forward and inverse, YaRN tables), RMSNorm, Hadamard, argmax and compressor pooling
// against kernels/cpu on deterministic random inputs; the store of compressed rows and the
// attention's entry lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/compress.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sequence_ops.h"
#include "kernels/quant/quant.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

// ---- RoPE ---------------------------------------------------------------------------------------

TEST(CudaRope, ForwardAndInverseBitExact) {
  NW_REQUIRE_GPU();
  struct Case {
    cpu::RopeParams rp;
    int64_t tokens;
    int heads;
    int offset;
    int64_t stride;
  };
  cpu::RopeParams yarn;  // V4-Flash compressed layers: theta 160000, YaRN factor 16, orig 65536
  yarn.rope_dim = 64;
  yarn.base = 160000.0;
  yarn.original_seq_len = 65536;
  yarn.factor = 16.0;
  cpu::RopeParams plain;  // ratio-0 layers: theta 10000, no YaRN
  plain.rope_dim = 64;
  cpu::RopeParams small;
  small.rope_dim = 6;
  const std::vector<Case> cases = {{yarn, 37, 64, 448, 512},
                                   {plain, 5, 4, 64, 128},
                                   {yarn, 1, 1, 0, 64},
                                   {small, 13, 3, 1, 9},
                                   {yarn, 130, 8, 64, 130},
                                   // More (row, pair)s than the grid's threads
                                   // cover at once: the grid-stride loop wraps.
                                   {plain, 25000, 5, 64, 128}};
  const int64_t n_pos = 1 << 20;  // positions up to 1M tokens
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "rope_dim " << c.rp.rope_dim << " yarn " << c.rp.original_seq_len << " tokens "
                 << c.tokens << " heads " << c.heads << " seed " << seed);
    const int pairs = c.rp.rope_dim / 2;
    const int64_t table_pos = c.tokens == 1 ? n_pos : 4096;
    const cpu::RopeTable table(c.rp, table_pos);
    std::vector<float> cos_h(static_cast<size_t>(table_pos * pairs)), sin_h(cos_h.size());
    for (int64_t t = 0; t < table_pos; ++t) {
      std::copy_n(table.cos(t), pairs, cos_h.begin() + t * pairs);
      std::copy_n(table.sin(t), pairs, sin_h.begin() + t * pairs);
    }
    Rng rng(seed++);
    std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
    for (auto& p : pos) p = static_cast<int32_t>(rng.Int(0, table_pos - 1));
    if (c.tokens > 3) {
      pos[1] = -1;                                   // out of the table: rows unchanged
      pos[2] = static_cast<int32_t>(table_pos);      // likewise
      pos[3] = static_cast<int32_t>(table_pos - 1);  // the last position
    }
    const int64_t rows = c.tokens * c.heads;
    const std::vector<float> x = rng.Vec(static_cast<size_t>(rows * c.stride), -3.0f, 3.0f);
    Guarded<float> dcos(cos_h), dsin(sin_h);
    Guarded<int32_t> dpos(pos);
    // half_split (the indexer-rope-layout fault's rotate_half layout): pairs (j, j + pairs),
    // each product and sum rounded as in the interleaved rotation.
    const auto half_split_rope = [pairs](float* v, const float* cs, const float* sn, bool inv) {
      for (int j = 0; j < pairs; ++j) {
        const float a = v[j], b = v[j + pairs], sj = inv ? -sn[j] : sn[j];
        const float ac = a * cs[j], bs = b * sj, as = a * sj, bc = b * cs[j];
        v[j] = ac - bs;
        v[j + pairs] = as + bc;
      }
    };
    for (int mode = 0; mode < 4; ++mode) {
      const bool inverse = (mode & 1) != 0;
      const bool half_split = (mode & 2) != 0;
      for (bool round : {false, true}) {
        std::vector<float> want = x;
        for (int64_t r = 0; r < rows; ++r) {
          const int32_t p = pos[static_cast<size_t>(r / c.heads)];
          if (p < 0 || p >= table_pos) continue;
          float* v = want.data() + r * c.stride + c.offset;
          if (half_split) {
            half_split_rope(v, table.cos(p), table.sin(p), inverse);
          } else {
            cpu::ApplyRope(v, pairs, table.cos(p), table.sin(p), inverse);
          }
          if (round) quant::FakeQuantBf16(v, v, static_cast<size_t>(2 * pairs));
        }
        Guarded<float> dx(x);
        RopeParams p;
        p.x = dx.get();
        p.positions = dpos.get();
        p.cos = dcos.get();
        p.sin = dsin.get();
        p.rows = rows;
        p.x_stride = c.stride;
        p.offset = c.offset;
        p.pairs = pairs;
        p.rows_per_position = c.heads;
        p.n_positions = table_pos;
        p.inverse = inverse;
        p.round_bf16 = round;
        p.half_split = half_split;
        NW_ASSERT_OK(LaunchRope(p, nullptr));
        NW_ASSERT_SYNC();
        EXPECT_TRUE(BitEqual(dx.Download(), want))
            << "inverse " << inverse << " round " << round << " half_split " << half_split;
        EXPECT_TRUE(dx.GuardsIntact());
      }
    }
  }
}

TEST(CudaRope, InverseUndoesForward) {
  NW_REQUIRE_GPU();
  cpu::RopeParams rp;
  rp.rope_dim = 64;
  const cpu::RopeTable table(rp, 1000);
  std::vector<float> cos_h, sin_h;
  for (int64_t t = 0; t < 1000; ++t) {
    cos_h.insert(cos_h.end(), table.cos(t), table.cos(t) + 32);
    sin_h.insert(sin_h.end(), table.sin(t), table.sin(t) + 32);
  }
  Rng rng(9);
  const std::vector<float> x = rng.Vec(64 * 50);
  std::vector<int32_t> pos(50);
  for (auto& p : pos) p = static_cast<int32_t>(rng.Int(0, 999));
  Guarded<float> dx(x), dcos(cos_h), dsin(sin_h);
  Guarded<int32_t> dpos(pos);
  RopeParams p;
  p.x = dx.get();
  p.positions = dpos.get();
  p.cos = dcos.get();
  p.sin = dsin.get();
  p.rows = 50;
  p.pairs = 32;
  p.n_positions = 1000;
  NW_ASSERT_OK(LaunchRope(p, nullptr));
  p.inverse = true;
  NW_ASSERT_OK(LaunchRope(p, nullptr));
  NW_ASSERT_SYNC();
  EXPECT_TRUE(Near(dx.Download(), x, {1e-6, 1e-5}));
}

// ---- RMSNorm and Hadamard -----------------------------------------------------------------------

TEST(CudaRmsNorm, MatchesCpu) {
  NW_REQUIRE_GPU();
  uint64_t seed = 20;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int>>{{1, 1},
                                                                       {3, 7},
                                                                       {64, 512},
                                                                       {5, 1024},
                                                                       {17, 4096},
                                                                       {2, 4097},
                                                                       {256, 128},
                                                                       {300, 256},
                                                                       {9, 200},
                                                                       {4, 129}}) {
    for (bool weighted : {true, false}) {
      for (bool round : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " w "
                                          << weighted << " round " << round << " seed " << seed);
        Rng rng(seed++);
        const std::vector<float> x = rng.Vec(static_cast<size_t>(rows * cols), -4.0f, 4.0f);
        const std::vector<float> w = rng.Vec(static_cast<size_t>(cols), 0.5f, 1.5f);
        const float eps = 1e-6f;
        std::vector<float> want(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          cpu::RmsNorm(x.data() + r * cols, weighted ? w.data() : nullptr, cols, eps,
                       want.data() + r * cols);
        }
        if (round) quant::FakeQuantBf16(want.data(), want.data(), want.size());
        Guarded<float> dx(x), dw(w), dy(x.size());
        RmsNormParams p;
        p.x = dx.get();
        p.w = weighted ? dw.get() : nullptr;
        p.y = dy.get();
        p.rows = rows;
        p.cols = cols;
        p.eps = eps;
        p.round_bf16 = round;
        NW_ASSERT_OK(LaunchRmsNorm(p, nullptr));
        NW_ASSERT_SYNC();
        const std::vector<float> got = dy.Download();
        // Equal to the CPU except where the two double sums of squares round to different
        // floats (1 ulp of the scale, so at most 2 ulp of an output; 1 bf16 ulp when rounded).
        EXPECT_TRUE(Near(got, want, {0.0, round ? 1.0 / 128 : 3e-7}));
        size_t exact = 0;
        for (size_t i = 0; i < got.size(); ++i)
          exact += FloatToBits(got[i]) == FloatToBits(want[i]);
        EXPECT_GE(static_cast<double>(exact), 0.99 * static_cast<double>(got.size()))
            << "bit-exact fraction";
        EXPECT_TRUE(dy.GuardsIntact());
        // In place and run-to-run determinism.
        Guarded<float> dz(x);
        p.x = dz.get();
        p.y = dz.get();
        NW_ASSERT_OK(LaunchRmsNorm(p, nullptr));
        NW_ASSERT_SYNC();
        EXPECT_TRUE(BitEqual(dz.Download(), got)) << "in place / run to run";
      }
    }
  }
}

TEST(CudaHadamard, BitExact) {
  NW_REQUIRE_GPU();
  uint64_t seed = 40;
  for (const auto& [rows, n] : std::vector<std::pair<int64_t, int>>{
           {1, 1}, {3, 2}, {5, 64}, {64, 128}, {7, 512}, {2, 8192}, {1000, 128}}) {
    for (bool round : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " n " << n << " seed " << seed);
      Rng rng(seed++);
      const std::vector<float> x = rng.Vec(static_cast<size_t>(rows * n), -2.0f, 2.0f);
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
      std::vector<float> want = x;
      for (int64_t r = 0; r < rows; ++r) cpu::HadamardTransform(want.data() + r * n, n, scale);
      if (round) quant::FakeQuantBf16(want.data(), want.data(), want.size());
      Guarded<float> dx(x), dy(x.size());
      HadamardParams p;
      p.x = dx.get();
      p.y = dy.get();
      p.rows = rows;
      p.n = n;
      p.scale = scale;
      p.round_bf16 = round;
      NW_ASSERT_OK(LaunchHadamard(p, nullptr));
      NW_ASSERT_SYNC();
      EXPECT_TRUE(BitEqual(dy.Download(), want));
      EXPECT_TRUE(dy.GuardsIntact());
      p.x = dx.get();
      p.y = dx.get();
      NW_ASSERT_OK(LaunchHadamard(p, nullptr));
      NW_ASSERT_SYNC();
      EXPECT_TRUE(BitEqual(dx.Download(), want)) << "in place";
    }
  }
  HadamardParams bad;
  bad.rows = 1;
  bad.n = 96;
  EXPECT_EQ(LaunchHadamard(bad, nullptr).code(), StatusCode::kInvalidArgument);
}

// ---- Argmax -------------------------------------------------------------------------------------

int32_t CpuArgmax(const float* x, int64_t n) {  // engine/cpu/generate.cc
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const float v = x[i], b = x[best];
    if (v > b || (b != b && v == v)) best = static_cast<int32_t>(i);
  }
  return best;
}

TEST(CudaArgmax, MatchesCpuWithTiesAndNan) {
  NW_REQUIRE_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [rows, n] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {9, 7}, {12, 513}, {5, 129280}, {300, 1024}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " n " << n);
    Rng rng(static_cast<uint64_t>(n));
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = x.data() + r * n;
      const int kind = static_cast<int>(r % 6);
      for (int64_t i = 0; i < n; ++i) {
        row[i] = kind == 1   ? static_cast<float>(rng.Int(-3, 3))  // many ties
                 : kind == 2 ? nan
                 : kind == 3 ? (i % 2 ? -0.0f : 0.0f)
                             : rng.Uniform(-10.0f, 10.0f);
      }
      if (kind == 4) {
        row[0] = nan;
        row[n - 1] = 100.0f;
      }
      if (kind == 5 && n > 2) {
        row[n / 2] = INFINITY;
        row[n / 3] = nan;
        row[n - 1] = INFINITY;
      }
    }
    std::vector<int32_t> want(static_cast<size_t>(rows));
    std::vector<float> want_v(want.size());
    for (int64_t r = 0; r < rows; ++r) {
      want[static_cast<size_t>(r)] = CpuArgmax(x.data() + r * n, n);
      want_v[static_cast<size_t>(r)] = x[static_cast<size_t>(r * n + want[static_cast<size_t>(r)])];
    }
    Guarded<float> dx(x), dv(want.size());
    Guarded<int32_t> di(want.size());
    ArgmaxParams p;
    p.x = dx.get();
    p.index = di.get();
    p.value = dv.get();
    p.rows = rows;
    p.n = n;
    NW_ASSERT_OK(LaunchArgmax(p, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(SameInts(di.Download(), want));
    EXPECT_TRUE(BitEqual(dv.Download(), want_v));
    EXPECT_TRUE(di.GuardsIntact());
    EXPECT_TRUE(dv.GuardsIntact());
  }
}

// ---- Compressor pooling -------------------------------------------------------------------------

TEST(CudaCompress, MatchesCpuPooling) {
  NW_REQUIRE_GPU();
  struct Case {
    int ratio;
    int dim;
    bool overlap;
    int64_t first_pos;
    int64_t n_rows;
    int64_t first_entry;
    int64_t n_entries;
  };
  const std::vector<Case> cases = {
      {4, 128, true, 0, 64, 0, 16},      // indexer compressor, from block 0 (no previous block)
      {4, 512, true, 36, 44, 10, 10},    // a later chunk: rows from the previous block onward
      {128, 512, false, 0, 384, 0, 3},   // HCA
      {128, 64, false, 256, 129, 2, 1},  // one entry, one spare row
      {4, 7, true, 0, 5, 0, 1},          // odd width, a single entry
      {3, 33, false, 0, 30, 1, 9}};
  uint64_t seed = 60;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "ratio " << c.ratio << " dim " << c.dim << " overlap " << c.overlap
                 << " entries " << c.first_entry << "+" << c.n_entries << " seed " << seed);
    Rng rng(seed++);
    const int64_t width = (c.overlap ? 2 : 1) * c.dim;
    const std::vector<float> kv = rng.Vec(static_cast<size_t>(c.n_rows * width), -2.0f, 2.0f);
    const std::vector<float> score = rng.Vec(static_cast<size_t>(c.n_rows * width), -6.0f, 6.0f);
    const int span = c.overlap ? 2 * c.ratio : c.ratio;
    std::vector<float> want(static_cast<size_t>(c.n_entries * c.dim));
    std::vector<float> scratch(static_cast<size_t>((span + 1) * c.dim));
    for (int64_t i = 0; i < c.n_entries; ++i) {
      const int64_t e = c.first_entry + i;
      const int64_t first = c.ratio * (c.overlap ? e - 1 : e);
      std::vector<const float*> kr(static_cast<size_t>(span)), sr(kr.size());
      for (int k = 0; k < span; ++k) {
        const int64_t pos = first + k;
        kr[static_cast<size_t>(k)] = pos < 0 ? nullptr : kv.data() + (pos - c.first_pos) * width;
        sr[static_cast<size_t>(k)] = pos < 0 ? nullptr : score.data() + (pos - c.first_pos) * width;
      }
      cpu::CompressPool({c.ratio, c.dim, c.overlap}, kr.data(), sr.data(), want.data() + i * c.dim,
                        scratch.data());
    }
    Guarded<float> dkv(kv), dscore(score), dout(want.size());
    CompressPoolParams p;
    p.kv = dkv.get();
    p.score = dscore.get();
    p.out = dout.get();
    p.n_rows = c.n_rows;
    p.first_pos = c.first_pos;
    p.first_entry = c.first_entry;
    p.n_entries = c.n_entries;
    p.ratio = c.ratio;
    p.dim = c.dim;
    p.overlap = c.overlap;
    NW_ASSERT_OK(LaunchCompressPool(p, nullptr));
    NW_ASSERT_SYNC();
    const std::vector<float> got = dout.Download();
    EXPECT_TRUE(Near(got, want, {1e-6, 1e-5}));
    EXPECT_TRUE(dout.GuardsIntact());
    NW_ASSERT_OK(LaunchCompressPool(p, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(BitEqual(dout.Download(), got)) << "run to run";
  }
  // An entry whose tokens are not in the rows is rejected before launch.
  CompressPoolParams bad;
  float dummy = 0;
  bad.kv = bad.score = &dummy;
  bad.out = &dummy;
  bad.ratio = 4;
  bad.dim = 8;
  bad.overlap = true;
  bad.first_pos = 8;
  bad.n_rows = 8;
  bad.first_entry = 2;  // needs tokens 4..11
  bad.n_entries = 1;
  EXPECT_EQ(LaunchCompressPool(bad, nullptr).code(), StatusCode::kInvalidArgument);
}

// ---- Sequence glue: stored rows, entry lists ----------------------------------------------

// Rows land at their page-mapped (or contiguous) places, the bf16 copy holds each value's bf16
// bits, and nothing outside the written rows changes.
TEST(CudaStoreRows, PagedRowsAndTheirBf16Copy) {
  NW_REQUIRE_GPU();
  constexpr int kDim = 24, kPage = 4;
  const std::vector<int32_t> pages = {3, 0, 2, 1};  // logical page -> physical page
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    Rng rng(paged ? 71 : 70);
    const int64_t first = 5, n = 9, rows = kPage * static_cast<int64_t>(pages.size());
    std::vector<float> src(static_cast<size_t>(n * kDim));
    for (float& v : src) v = rng.Wide();
    src[3] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> before(static_cast<size_t>(rows * kDim), -7.0f);
    const std::vector<uint16_t> before16(before.size(), 0xABCD);
    Guarded<float> dsrc(src), ddst(before);
    Guarded<uint16_t> ddst16(before16);
    Guarded<int32_t> dpages(pages);
    StoreRowsParams p;
    p.src = dsrc.get();
    p.dst = ddst.get();
    p.dst_bf16 = ddst16.get();
    p.pages = paged ? dpages.get() : nullptr;
    p.page_size = kPage;
    p.first_entry = first;
    p.n = n;
    p.dim = kDim;
    NW_ASSERT_OK(LaunchStoreRows(p, nullptr));
    NW_ASSERT_SYNC();
    std::vector<float> want = before;
    std::vector<uint16_t> want16 = before16;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t e = first + i;
      const int64_t row =
          paged ? int64_t{pages[static_cast<size_t>(e / kPage)]} * kPage + e % kPage : e;
      for (int c = 0; c < kDim; ++c) {
        const float v = src[static_cast<size_t>(i * kDim + c)];
        want[static_cast<size_t>(row * kDim + c)] = v;
        want16[static_cast<size_t>(row * kDim + c)] = quant::FloatToBf16Bits(v);
      }
    }
    EXPECT_TRUE(BitEqual(ddst.Download(), want));
    EXPECT_EQ(ddst16.Download(), want16);
    EXPECT_TRUE(ddst.GuardsIntact());
    EXPECT_TRUE(ddst16.GuardsIntact());
  }
}

// Entry lists against a host version of sequence_ops.h's contract: the window rows, kAll through a
// page table, and kSelected sorted ascending with -1 dropped and duplicates kept, for selections
// of the warp kernel's width (64) and of the block kernel's (200).
TEST(CudaAttnIndices, WindowAllAndSelectedListsMatchTheContract) {
  NW_REQUIRE_GPU();
  constexpr int kW = 16, kPage = 4;
  const int64_t first = 37, tokens = 45, ratio = 4;
  const std::vector<int32_t> pages = {5, 1, 7, 0, 3, 2, 6, 4, 8, 9, 10, 11, 12, 13, 14, 15};
  for (const CompressedMode mode :
       {CompressedMode::kNone, CompressedMode::kAll, CompressedMode::kSelected}) {
    for (const int width : {64, 200}) {
      if (mode != CompressedMode::kSelected && width != 64) continue;
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " width " << width);
      Rng rng(static_cast<uint64_t>(90 + width + static_cast<int>(mode)));
      std::vector<int32_t> sel(static_cast<size_t>(tokens * width));
      for (int32_t& v : sel) {
        const int64_t r = rng.Int(0, 9);
        v = r == 0 ? -1 : static_cast<int32_t>(rng.Int(0, 20));  // duplicates are common
      }
      const int64_t stride = std::max<int64_t>(width, (first + tokens) / ratio);
      Guarded<int32_t> dsel(sel), dpages(pages);
      Guarded<int32_t> wi(static_cast<size_t>(tokens * kW)), wl(static_cast<size_t>(tokens));
      Guarded<int32_t> ci(static_cast<size_t>(tokens * stride)), cl(static_cast<size_t>(tokens));
      wi.Fill(0x7F);
      ci.Fill(0x7F);
      AttnIndicesParams p;
      p.tokens = tokens;
      p.first_pos = first;
      p.window = kW;
      p.win_idx = wi.get();
      p.win_len = wl.get();
      p.mode = mode;
      p.ratio = static_cast<int>(ratio);
      p.sel = dsel.get();
      p.sel_width = width;
      p.pages = mode == CompressedMode::kAll ? dpages.get() : nullptr;
      p.page_size = kPage;
      p.comp_idx = ci.get();
      p.comp_len = cl.get();
      p.comp_stride = stride;
      NW_ASSERT_OK(LaunchAttnIndices(p, nullptr));
      NW_ASSERT_SYNC();
      const std::vector<int32_t> win = wi.Download(), wlen = wl.Download(), comp = ci.Download(),
                                 clen = cl.Download();
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t pos = first + t, w0 = std::max<int64_t>(0, pos - kW + 1);
        ASSERT_EQ(wlen[static_cast<size_t>(t)], pos - w0 + 1) << "token " << t;
        for (int64_t q = w0; q <= pos; ++q) {
          const int64_t want = q >= first ? kW + (q - first) : q % kW;
          ASSERT_EQ(win[static_cast<size_t>(t * kW + q - w0)], want) << "token " << t;
        }
        std::vector<int32_t> want;
        if (mode == CompressedMode::kAll) {
          for (int64_t i = 0; i < (pos + 1) / ratio; ++i) {
            want.push_back(pages[static_cast<size_t>(i / kPage)] * kPage +
                           static_cast<int32_t>(i % kPage));
          }
        } else if (mode == CompressedMode::kSelected) {
          for (int i = 0; i < width; ++i) {
            const int32_t v = sel[static_cast<size_t>(t * width + i)];
            if (v >= 0) want.push_back(v);
          }
          std::sort(want.begin(), want.end());
        }
        ASSERT_EQ(clen[static_cast<size_t>(t)], static_cast<int32_t>(want.size())) << "token " << t;
        const std::vector<int32_t> got(
            comp.begin() + t * stride,
            comp.begin() + t * stride + static_cast<int64_t>(want.size()));
        EXPECT_EQ(got, want) << "token " << t;
      }
      EXPECT_TRUE(ci.GuardsIntact());
      EXPECT_TRUE(wi.GuardsIntact());
    }
  }
}

}  // namespace
}  // namespace nw::cuda::testing
