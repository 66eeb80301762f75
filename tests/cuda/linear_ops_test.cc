// The exact fp32 linear kernel (kernels/cuda/linear.h) against the CPU reference bit for bit:
// dense (cpu::Linear / LinearRows, 4 lanes), batched grouped (cpu::GroupedLinear, 8 lanes) and
// gathered per-expert products, over odd shapes (tile edges, `in` not a multiple of the lanes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/linear.h"
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

void ExpectBitEqual(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(FloatToBits(got[i]), FloatToBits(want[i]))
        << what << " element " << i << ": got " << got[i] << " want " << want[i];
  }
}

TEST(CudaLinear, DenseBitExactWithCpuLinear) {
  NW_REQUIRE_GPU();
  struct Case {
    int64_t rows, in, out;
  };
  // Small grids take the 16 x 32 tile; the last two the 32 x 64 tile (at least two blocks per
  // multiprocessor), with ragged rows, outputs and a k tail.
  for (const Case c :
       {Case{1, 256, 1024}, Case{33, 1024, 24}, Case{64, 130, 65}, Case{5, 7, 3},
        Case{97, 512, 129}, Case{2048, 1024, 24}, Case{4099, 258, 257}, Case{8192, 256, 128}}) {
    Rng rng(static_cast<uint64_t>(c.rows * 1000 + c.in));
    const std::vector<float> x = rng.Vec(static_cast<size_t>(c.rows * c.in));
    const std::vector<float> w = rng.Vec(static_cast<size_t>(c.out * c.in));
    std::vector<float> want(static_cast<size_t>(c.rows * c.out));
    cpu::Linear(x.data(), c.rows, c.in, w.data(), c.out, want.data());
    auto dx = Up(x), dw = Up(w);
    auto dy = DeviceBuffer<float>::Allocate(want.size());
    ASSERT_TRUE(dy.ok());
    LinearParams p;
    p.x = dx.data();
    p.w = dw.data();
    p.y = dy->data();
    p.rows = c.rows;
    p.in = c.in;
    p.out = c.out;
    NW_ASSERT_OK(LaunchLinear(p, nullptr));
    NW_ASSERT_SYNC();
    ExpectBitEqual(Down(*dy), want,
                   "dense " + std::to_string(c.rows) + "x" + std::to_string(c.in) + "x" +
                       std::to_string(c.out));
  }
}

TEST(CudaLinear, GroupedBitExactWithCpuGroupedLinear) {
  NW_REQUIRE_GPU();
  const int groups = 2;
  const int64_t rows = 37, group_in = 256, rank = 128;
  Rng rng(7);
  const std::vector<float> x = rng.Vec(static_cast<size_t>(rows * groups * group_in));
  const std::vector<float> w = rng.Vec(static_cast<size_t>(groups * rank * group_in));
  std::vector<float> want(static_cast<size_t>(rows * groups * rank));
  for (int64_t t = 0; t < rows; ++t) {
    cpu::GroupedLinear(x.data() + t * groups * group_in, w.data(), groups, group_in, rank,
                       want.data() + t * groups * rank);
  }
  auto dx = Up(x), dw = Up(w);
  auto dy = DeviceBuffer<float>::Allocate(want.size());
  ASSERT_TRUE(dy.ok());
  LinearParams p;
  p.x = dx.data();
  p.w = dw.data();
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
  ExpectBitEqual(Down(*dy), want, "grouped");
}

TEST(CudaLinear, GatheredPerExpertBitExact) {
  NW_REQUIRE_GPU();
  // Three experts; rows of x routed as lists [0,2,4], [1], [3,4,0,2] (one tile each, the last
  // with a second tile of one row when tile size is forced by the list).
  const int64_t in = 96, out = 40, x_rows = 5;
  Rng rng(11);
  const std::vector<float> x = rng.Vec(static_cast<size_t>(x_rows * in));
  const std::vector<float> w = rng.Vec(static_cast<size_t>(3 * out * in));
  const std::vector<int32_t> list = {0, 2, 4, 1, 3, 4, 0, 2};
  const std::vector<int32_t> tile_expert = {0, 1, 2, -1}, tile_row0 = {0, 3, 4, 0},
                             tile_rows = {3, 1, 4, 0};
  std::vector<float> want(list.size() * static_cast<size_t>(out));
  const int expert_of[] = {0, 0, 0, 1, 2, 2, 2, 2};
  for (size_t r = 0; r < list.size(); ++r) {
    cpu::Linear(x.data() + list[r] * in, 1, in, w.data() + expert_of[r] * out * in, out,
                want.data() + r * static_cast<size_t>(out));
  }
  auto dx = Up(x), dw = Up(w);
  auto dl = Up(list), de = Up(tile_expert), d0 = Up(tile_row0), dn = Up(tile_rows);
  auto dy = DeviceBuffer<float>::Allocate(want.size());
  ASSERT_TRUE(dy.ok());
  LinearParams p;
  p.x = dx.data();
  p.w = dw.data();
  p.y = dy->data();
  p.rows = static_cast<int64_t>(list.size());
  p.in = in;
  p.out = out;
  p.row_index = dl.data();
  p.tile_expert = de.data();
  p.tile_row0 = d0.data();
  p.tile_rows = dn.data();
  p.max_tiles = 4;
  p.x_rows = x_rows;
  NW_ASSERT_OK(LaunchLinear(p, nullptr));
  NW_ASSERT_SYNC();
  ExpectBitEqual(Down(*dy), want, "gathered");
}

TEST(CudaLinear, GatheredManyTilesBitExact) {
  NW_REQUIRE_GPU();
  // 3,001 rows each routed to two of four experts (as MoE dispatch lists them): enough tiles for
  // the 32 x 64 tile, partial tiles at each expert's end, and a k tail (in % 4 == 2).
  const int64_t x_rows = 3001, in = 258, out = 129, E = 4;
  Rng rng(13);
  const std::vector<float> x = rng.Vec(static_cast<size_t>(x_rows * in));
  const std::vector<float> w = rng.Vec(static_cast<size_t>(E * out * in));
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
  auto dx = Up(x), dw = Up(w);
  auto dl = Up(list), de = Up(tile_expert), d0 = Up(tile_row0), dn = Up(tile_rows);
  auto dy = DeviceBuffer<float>::Allocate(want.size());
  ASSERT_TRUE(dy.ok());
  LinearParams p;
  p.x = dx.data();
  p.w = dw.data();
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
  ExpectBitEqual(Down(*dy), want, "gathered, many tiles");
}

TEST(CudaLinear, RejectsBadParams) {
  LinearParams p;
  p.rows = 1;
  p.in = 4;
  p.out = 4;
  p.lanes = 3;
  EXPECT_FALSE(LaunchLinear(p, nullptr).ok());
  p.lanes = 4;
  EXPECT_FALSE(LaunchLinear(p, nullptr).ok());  // null pointers
}

}  // namespace
}  // namespace nw::cuda::testing
