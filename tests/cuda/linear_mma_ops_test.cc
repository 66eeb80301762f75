// The tensor-core linear path (kernels/cuda/linear.h, LinearParams::w_bf16) in its three shapes:
//  - on small integer values every partial sum is an exact fp32 integer, so the summation order
//    cannot matter and the result must equal the CPU's Linear bit for bit (catches any wrong row,
//    output, k index, stride, batch or tile-list handling);
//  - on random bf16 values it must agree with a double-precision reference within the fp32
//    accumulation bound (4 * in * 2^-24 * sum |x_i w_i|);
//  - x that is not a bf16 value is rounded to bf16 (round to nearest even) as it is staged;
//  - with x_split, and with W in three pieces, any fp32 x and W give the fp32 product within the
//    same bound (the pieces sum to the values exactly, so every product is exact);
//  - the W-resident kernel gives the tiled kernel's bits (forced through mma_kernel; kAuto picks
//    it from 16,384 rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/linear.h"
#include "kernels/quant/scalar.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

template <typename T>
DeviceBuffer<T> Up(const std::vector<T>& v) {
  auto b = DeviceBuffer<T>::Allocate(v.size());
  EXPECT_TRUE(b.ok());
  EXPECT_TRUE(b->CopyFromHost(v.data(), v.size()).ok());
  return std::move(b).value();
}

std::vector<float> Down(const DeviceBuffer<float>& b) {
  std::vector<float> v(b.size());
  EXPECT_TRUE(b.CopyToHost(v.data(), v.size()).ok());
  return v;
}

std::vector<uint16_t> Bf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = quant::FloatToBf16Bits(v[i]);
  return b;
}

std::vector<float> Ints(Rng& rng, size_t n, int64_t lim) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Int(-lim, lim));
  return v;
}

std::vector<float> RandomBf16(Rng& rng, size_t n) {
  std::vector<float> v = rng.Vec(n);
  for (float& x : v) x = quant::RoundBf16(x);
  return v;
}

// y = x w^T over `rows` rows with strides, in double, and the error bound of each output.
void Reference(const std::vector<float>& x, int64_t x_stride, const std::vector<float>& w,
               int64_t rows, int64_t in, int64_t out, std::vector<double>* y,
               std::vector<double>* bound, bool round_x = true) {
  y->assign(static_cast<size_t>(rows * out), 0.0);
  bound->assign(y->size(), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0, a = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        const float xv = x[t * x_stride + i];
        const double p = static_cast<double>(round_x ? quant::RoundBf16(xv) : xv) * w[o * in + i];
        s += p;
        a += std::fabs(p);
      }
      (*y)[static_cast<size_t>(t * out + o)] = s;
      (*bound)[static_cast<size_t>(t * out + o)] = 4.0 * static_cast<double>(in) * 0x1p-24 * a;
    }
  }
}

void ExpectBitEqual(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(FloatToBits(got[i]), FloatToBits(want[i]))
        << what << " element " << i << ": got " << got[i] << " want " << want[i];
  }
}

struct Dense {
  int64_t rows, in, out, x_stride;
};

// W's three exact bf16 pieces, piece-major.
std::vector<uint16_t> Bf16Pieces(const std::vector<float>& w) {
  std::vector<uint16_t> b(3 * w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    float r = w[i];
    for (size_t k = 0; k < 3; ++k) {
      b[k * w.size() + i] = quant::FloatToBf16Bits(r);
      r -= quant::Bf16BitsToFloat(b[k * w.size() + i]);
    }
  }
  return b;
}

std::vector<float> RunDense(const Dense& c, const std::vector<float>& x,
                            const std::vector<float>& w, bool x_split = false,
                            bool w_pieces = false, bool round_bf16 = false,
                            DeviceBuffer<float>* workspace = nullptr) {
  auto dx = Up(x);
  auto dw = Up(w_pieces ? Bf16Pieces(w) : Bf16Bits(w));
  auto dy = DeviceBuffer<float>::Allocate(static_cast<size_t>(c.rows * c.out));
  EXPECT_TRUE(dy.ok());
  LinearParams p;
  p.x = dx.data();
  p.w_bf16 = dw.data();
  p.y = dy->data();
  p.rows = c.rows;
  p.in = c.in;
  p.out = c.out;
  p.x_stride = c.x_stride;
  p.x_split = x_split;
  p.round_bf16 = round_bf16;
  if (workspace != nullptr) {
    p.split_workspace = workspace->data();
    p.split_workspace_floats = static_cast<int64_t>(workspace->size());
  }
  if (w_pieces) {
    p.w_pieces = 3;
    p.w_piece_stride = static_cast<int64_t>(w.size());
  }
  EXPECT_TRUE(LaunchLinear(p, nullptr).ok());
  EXPECT_TRUE(SyncStatus(__FILE__, __LINE__).ok());
  return Down(*dy);
}

const Dense kDenseCases[] = {{1, 256, 1024, 256},  {33, 1024, 24, 1024}, {64, 130, 65, 130},
                             {5, 7, 3, 9},         {97, 512, 129, 516},  {4099, 258, 257, 258},
                             {8192, 256, 128, 256}};

TEST(CudaLinearMma, DenseIntegerInputsEqualCpu) {
  NW_REQUIRE_GPU();
  for (const Dense& c : kDenseCases) {
    Rng rng(static_cast<uint64_t>(c.rows * 7 + c.in));
    const std::vector<float> x = Ints(rng, static_cast<size_t>(c.rows * c.x_stride), 8);
    const std::vector<float> w = Ints(rng, static_cast<size_t>(c.out * c.in), 8);
    std::vector<float> want(static_cast<size_t>(c.rows * c.out));
    for (int64_t t = 0; t < c.rows; ++t) {
      cpu::Linear(x.data() + t * c.x_stride, 1, c.in, w.data(), c.out, want.data() + t * c.out);
    }
    ExpectBitEqual(RunDense(c, x, w), want,
                   "dense " + std::to_string(c.rows) + "x" + std::to_string(c.in) + "x" +
                       std::to_string(c.out));
  }
}

TEST(CudaLinearMma, DenseRandomBf16WithinTheAccumulationBound) {
  NW_REQUIRE_GPU();
  for (const Dense& c : kDenseCases) {
    Rng rng(static_cast<uint64_t>(c.rows * 13 + c.out));
    const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(c.rows * c.x_stride));
    const std::vector<float> w = RandomBf16(rng, static_cast<size_t>(c.out * c.in));
    std::vector<double> want, bound;
    Reference(x, c.x_stride, w, c.rows, c.in, c.out, &want, &bound);
    const std::vector<float> got = RunDense(c, x, w);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], bound[i])
          << "dense " << c.rows << "x" << c.in << "x" << c.out << " element " << i;
    }
  }
}

TEST(CudaLinearMma, RoundsInputsThatAreNotBf16) {
  NW_REQUIRE_GPU();
  const Dense c{300, 192, 80, 192};
  Rng rng(5);
  const std::vector<float> x = rng.Vec(static_cast<size_t>(c.rows * c.in));  // not bf16 values
  const std::vector<float> w = RandomBf16(rng, static_cast<size_t>(c.out * c.in));
  std::vector<double> want, bound;
  Reference(x, c.x_stride, w, c.rows, c.in, c.out, &want, &bound);  // rounds x to bf16
  const std::vector<float> got = RunDense(c, x, w);
  int far_from_unrounded = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], bound[i]) << "element " << i;
    const size_t t = i / static_cast<size_t>(c.out), o = i % static_cast<size_t>(c.out);
    double unrounded = 0.0;
    for (int64_t k = 0; k < c.in; ++k) {
      unrounded += static_cast<double>(x[t * c.in + k]) * w[o * c.in + k];
    }
    if (std::fabs(unrounded - want[i]) > 2 * bound[i]) ++far_from_unrounded;
  }
  EXPECT_GT(far_from_unrounded, 0) << "the inputs' rounding is not visible: the test is blind";
}

TEST(CudaLinearMma, SplitInputsAndWeightsGiveTheFp32Product) {
  NW_REQUIRE_GPU();
  for (const Dense& c : kDenseCases) {
    for (int mode = 0; mode < 2; ++mode) {  // x split; W in pieces
      const bool x_split = mode == 0, w_pieces = mode == 1;
      Rng rng(static_cast<uint64_t>(c.rows * 31 + c.in + mode));
      // Plain fp32 values (not bf16 values), some tiny, some large.
      std::vector<float> x(static_cast<size_t>(c.rows * c.x_stride)),
          w(static_cast<size_t>(c.out * c.in));
      for (float& v : x) v = x_split ? rng.Uniform(-1.0f, 1.0f) * (1 + rng.Int(0, 3) * 100) : 0;
      for (float& v : w) v = w_pieces ? rng.Uniform(-1.0f, 1.0f) : 0;
      if (!x_split) x = RandomBf16(rng, x.size());
      if (!w_pieces) w = RandomBf16(rng, w.size());
      std::vector<double> want, bound;
      Reference(x, c.x_stride, w, c.rows, c.in, c.out, &want, &bound, /*round_x=*/false);
      const std::vector<float> got = RunDense(c, x, w, x_split, w_pieces);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], bound[i]) << "mode " << mode << " dense " << c.rows << "x"
                                               << c.in << "x" << c.out << " element " << i;
      }
    }
  }
}

// A caller's split-k workspace (LinearParams::split_workspace, what a captured CUDA graph needs)
// gives the bits of the launch's own buffer, and is really used: the split products (33 rows over
// 1,024 inputs; one row of 256 outputs over 1,024) write into it, the one-grid product (300 x
// 200 over 256 inputs) does not.
TEST(CudaLinearMma, SplitWorkspaceGivesTheSameBits) {
  NW_REQUIRE_GPU();
  for (const Dense& c :
       {Dense{33, 1024, 24, 1024}, Dense{1, 1024, 256, 1024}, Dense{300, 256, 200, 256}}) {
    Rng rng(21 + static_cast<uint64_t>(c.rows));
    const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(c.rows * c.in));
    const std::vector<float> w = RandomBf16(rng, static_cast<size_t>(c.out * c.in));
    const std::vector<float> own = RunDense(c, x, w);
    const std::vector<float> sentinel(static_cast<size_t>(LinearSplitWorkspaceFloats()), -7.0f);
    auto ws = Up(sentinel);
    const std::vector<float> got = RunDense(c, x, w, false, false, false, &ws);
    ExpectBitEqual(got, own, "workspace rows " + std::to_string(c.rows));
    const std::vector<float> after = Down(ws);
    const bool used = after != sentinel;
    EXPECT_EQ(used, c.rows != 300) << "rows " << c.rows;
  }
}

TEST(CudaLinearMma, RoundedOutputsEqualASeparateBf16Pass) {
  NW_REQUIRE_GPU();
  // One grid, and a split k (33 rows over 1,024 inputs: the partial sums' kernel rounds).
  for (const Dense& split_case : {Dense{300, 256, 200, 256}, Dense{33, 1024, 24, 1024}}) {
    const Dense& c = split_case;
    Rng rng(9 + static_cast<uint64_t>(c.in));
    const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(c.rows * c.in));
    const std::vector<float> w = RandomBf16(rng, static_cast<size_t>(c.out * c.in));
    const std::vector<float> plain = RunDense(c, x, w);
    const std::vector<float> rounded = RunDense(c, x, w, false, false, /*round_bf16=*/true);
    std::vector<float> want(plain.size());
    int changed = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      want[i] = quant::RoundBf16(plain[i]);
      changed += want[i] != plain[i];
    }
    EXPECT_GT(changed, 0) << "no output changed by rounding: the test is blind";
    ExpectBitEqual(rounded, want, "round_bf16 " + std::to_string(c.in));
  }
  const Dense c{300, 256, 200, 256};
  Rng rng(9);
  const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(c.rows * c.in));
  const std::vector<float> w = RandomBf16(rng, static_cast<size_t>(c.out * c.in));
  const std::vector<float> plain = RunDense(c, x, w);
  // The exact kernels have no rounding epilogue: asking for one is an error, not ignored.
  auto dx = Up(x);
  auto dw = Up(w);
  auto dy = DeviceBuffer<float>::Allocate(plain.size());
  ASSERT_TRUE(dy.ok());
  LinearParams p;
  p.x = dx.data();
  p.w = dw.data();
  p.y = dy->data();
  p.rows = c.rows;
  p.in = c.in;
  p.out = c.out;
  p.round_bf16 = true;
  EXPECT_FALSE(LaunchLinear(p, nullptr).ok());
}

TEST(CudaLinearMma, RejectsSplitInputsWithWeightPieces) {
  NW_REQUIRE_GPU();
  auto dx = DeviceBuffer<float>::Allocate(64);
  auto dw = DeviceBuffer<uint16_t>::Allocate(3 * 64);
  auto dy = DeviceBuffer<float>::Allocate(8);
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  LinearParams p;
  p.x = dx->data();
  p.w_bf16 = dw->data();
  p.y = dy->data();
  p.rows = 8;
  p.in = 8;
  p.out = 8;
  p.x_split = true;
  p.w_pieces = 3;
  p.w_piece_stride = 64;
  EXPECT_FALSE(LaunchLinear(p, nullptr).ok());
  p.x_split = false;
  p.w_piece_stride = 0;
  EXPECT_FALSE(LaunchLinear(p, nullptr).ok());
  p.w_pieces = 2;
  EXPECT_FALSE(LaunchLinear(p, nullptr).ok());
}

TEST(CudaLinearMma, BatchedIntegerInputsEqualCpuGroupedLinear) {
  NW_REQUIRE_GPU();
  const int groups = 2;
  const int64_t rows = 77, group_in = 256, rank = 128;
  Rng rng(17);
  const std::vector<float> x = Ints(rng, static_cast<size_t>(rows * groups * group_in), 4);
  const std::vector<float> w = Ints(rng, static_cast<size_t>(groups * rank * group_in), 4);
  std::vector<float> want(static_cast<size_t>(rows * groups * rank));
  for (int64_t t = 0; t < rows; ++t) {
    cpu::GroupedLinear(x.data() + t * groups * group_in, w.data(), groups, group_in, rank,
                       want.data() + t * groups * rank);
  }
  auto dx = Up(x);
  auto dw = Up(Bf16Bits(w));
  auto dy = DeviceBuffer<float>::Allocate(want.size());
  ASSERT_TRUE(dy.ok());
  LinearParams p;
  p.x = dx.data();
  p.w_bf16 = dw.data();
  p.y = dy->data();
  p.rows = rows;
  p.in = group_in;
  p.out = rank;
  p.x_stride = groups * group_in;
  p.y_stride = groups * rank;
  p.lanes = 8;
  p.batches = groups;
  p.x_batch_stride = group_in;
  p.w_batch_stride = rank * group_in;
  p.y_batch_stride = rank;
  NW_ASSERT_OK(LaunchLinear(p, nullptr));
  NW_ASSERT_SYNC();
  ExpectBitEqual(Down(*dy), want, "batched");
}

TEST(CudaLinearMma, GatheredIntegerInputsEqualCpu) {
  NW_REQUIRE_GPU();
  // 3,001 rows each routed to two of four experts, as MoE dispatch lists them: partial tiles at
  // each expert's end, `in` not a multiple of 8 (the scalar staging path) and of 64.
  for (const int64_t in : {int64_t{256}, int64_t{258}}) {
    const int64_t x_rows = 3001, out = 129, E = 4;
    Rng rng(static_cast<uint64_t>(in));
    const std::vector<float> x = Ints(rng, static_cast<size_t>(x_rows * in), 8);
    const std::vector<float> w = Ints(rng, static_cast<size_t>(E * out * in), 8);
    const ExpertRouting route = RouteToTwoExperts(rng, x_rows, E, kLinearTileRows);
    const auto& list = route.list;
    const auto& expert_of = route.expert_of;
    const auto& tile_expert = route.tile_expert;
    const auto& tile_row0 = route.tile_row0;
    const auto& tile_rows = route.tile_rows;
    std::vector<float> want(list.size() * static_cast<size_t>(out));
    for (size_t r = 0; r < list.size(); ++r) {
      cpu::Linear(x.data() + list[r] * in, 1, in, w.data() + expert_of[r] * out * in, out,
                  want.data() + r * static_cast<size_t>(out));
    }
    auto dx = Up(x);
    auto dw = Up(Bf16Bits(w));
    auto dl = Up(list), de = Up(tile_expert), d0 = Up(tile_row0), dn = Up(tile_rows);
    auto dy = DeviceBuffer<float>::Allocate(want.size());
    ASSERT_TRUE(dy.ok());
    LinearParams p;
    p.x = dx.data();
    p.w_bf16 = dw.data();
    p.y = dy->data();
    p.rows = static_cast<int64_t>(list.size());
    p.in = in;
    p.out = out;
    p.row_index = dl.data();
    p.tile_expert = de.data();
    p.tile_row0 = d0.data();
    p.tile_rows = dn.data();
    p.max_tiles = static_cast<int64_t>(tile_expert.size());
    p.x_rows = x_rows;
    NW_ASSERT_OK(LaunchLinear(p, nullptr));
    NW_ASSERT_SYNC();
    ExpectBitEqual(Down(*dy), want, "gathered, in " + std::to_string(in));
  }
}

// The W-resident kernel against the tiled one, bit for bit: the same mma.sync sequence on each
// accumulator (linear_mma_resident.cu), so any difference is a wrong row, output, k step, piece
// order, stride, batch or rounding. Random fp32 values (not bf16 values), so every product and
// the order of the sums shows.
TEST(CudaLinearMma, ResidentKernelGivesTheTiledKernelsBits) {
  NW_REQUIRE_GPU();
  struct Case {
    int64_t rows, in, out, x_stride;
    int batches;
    bool pieces_fit;  // W in three pieces fits in shared memory too
  };
  // Outputs of 4, 8 and 16 n8 tiles a warp and partial ones; inputs not a multiple of 64 (and
  // of 32: the padding's zero step), a wide x stride, many tiles a block, two batches, few rows.
  const Case cases[] = {{8192, 256, 128, 256, 1, false}, {4099, 128, 257, 128, 1, false},
                        {5000, 128, 512, 128, 1, false}, {4096, 136, 64, 136, 1, true},
                        {4100, 256, 200, 264, 1, false}, {40000, 256, 256, 256, 1, false},
                        {4200, 256, 128, 512, 2, false}, {5, 64, 24, 64, 1, true}};
  for (const Case& c : cases) {
    for (int mode = 0; mode < 4; ++mode) {  // round x; x split; W in 3 pieces; round outputs
      const bool x_split = mode == 1, w_pieces = mode == 2, round_out = mode == 3;
      if (w_pieces && !c.pieces_fit) continue;
      const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.in) + "x" +
                               std::to_string(c.out) + " batches " + std::to_string(c.batches) +
                               " mode " + std::to_string(mode);
      SCOPED_TRACE(what);
      Rng rng(static_cast<uint64_t>(c.rows * 3 + c.out * 5 + mode));
      const std::vector<float> x = rng.Vec(static_cast<size_t>(c.rows * c.x_stride));
      const std::vector<float> w = rng.Vec(static_cast<size_t>(c.batches * c.out * c.in));
      auto dx = Up(x);
      auto dw = Up(w_pieces ? Bf16Pieces(w) : Bf16Bits(w));
      const size_t y_size = static_cast<size_t>(c.rows * c.batches * c.out);
      LinearParams p;
      p.x = dx.data();
      p.w_bf16 = dw.data();
      p.rows = c.rows;
      p.in = c.in;
      p.out = c.out;
      p.x_stride = c.x_stride;
      p.y_stride = c.batches * c.out;
      p.x_split = x_split;
      p.round_bf16 = round_out;
      if (w_pieces) {
        p.w_pieces = 3;
        p.w_piece_stride = static_cast<int64_t>(w.size());
      }
      p.batches = c.batches;
      p.x_batch_stride = c.in;  // batch b reads x[:, b * in ...]
      p.w_batch_stride = c.out * c.in;
      p.y_batch_stride = c.out;
      std::vector<float> got[2];
      for (int k = 0; k < 2; ++k) {
        auto dy = DeviceBuffer<float>::Allocate(y_size);
        ASSERT_TRUE(dy.ok());
        p.y = dy->data();
        p.mma_kernel = k == 0 ? LinearMmaKernel::kTiled : LinearMmaKernel::kResident;
        NW_ASSERT_OK(LaunchLinear(p, nullptr));
        NW_ASSERT_SYNC();
        got[k] = Down(*dy);
      }
      ExpectBitEqual(got[1], got[0], "resident vs tiled, " + what);
      // Not all zeros (a kernel that wrote nothing would still need the other to match it).
      EXPECT_GT(std::count_if(got[1].begin(), got[1].end(), [](float v) { return v != 0.0f; }),
                static_cast<std::ptrdiff_t>(y_size / 2));
    }
  }
}

TEST(CudaLinearMma, ResidentKernelRefusesWhatItCannotHold) {
  NW_REQUIRE_GPU();
  auto dx = DeviceBuffer<float>::Allocate(64 * 2048);
  auto dw = DeviceBuffer<uint16_t>::Allocate(1024 * 2048);
  auto dy = DeviceBuffer<float>::Allocate(64 * 1024);
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  LinearParams p;
  p.x = dx->data();
  p.w_bf16 = dw->data();
  p.y = dy->data();
  p.rows = 64;
  p.mma_kernel = LinearMmaKernel::kResident;
  p.in = 256;
  p.out = 1024;  // more outputs than a block's warps cover
  EXPECT_EQ(LaunchLinear(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.out = 512;
  p.in = 2048;  // W (2 MiB) beyond shared memory
  EXPECT_EQ(LaunchLinear(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.in = 250;  // rows not 16-byte aligned
  EXPECT_EQ(LaunchLinear(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.in = 256;
  p.out = 128;
  NW_EXPECT_OK(LaunchLinear(p, nullptr));  // and what it can
  NW_ASSERT_SYNC();
}

}  // namespace
}  // namespace nw::cuda::testing
