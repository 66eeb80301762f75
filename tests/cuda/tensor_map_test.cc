// Tensor maps for the bulk tensor copy engine (kernels/cuda/tensor_map.h): bad shapes and
// alignments are refused on the host before the driver is asked; a valid map encodes on a GPU.
// The wgmma kernels' tests (indexer, attention) run the maps end to end.
#include "kernels/cuda/tensor_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

const void* At(uintptr_t address) { return reinterpret_cast<const void*>(address); }

TEST(CudaTensorMap, RefusesBadShapesBeforeTheDriver) {
  const void* ok = At(0x10000);
  EXPECT_EQ(Bf16RowsSw128Map(nullptr, 64, 128, 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16RowsSw128Map(ok, 0, 128, 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16RowsSw128Map(ok, 64, 0, 64).status().code(), StatusCode::kInvalidArgument);
  // Base not 16-byte aligned; rows not a multiple of 16 bytes (12 bf16 = 24 bytes).
  EXPECT_EQ(Bf16RowsSw128Map(At(0x10008), 64, 128, 64).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16RowsSw128Map(ok, 64, 12, 64).status().code(), StatusCode::kInvalidArgument);
  // Box rows outside [1, 256]; 2^32 rows.
  EXPECT_EQ(Bf16RowsSw128Map(ok, 64, 128, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16RowsSw128Map(ok, 64, 128, 257).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16RowsSw128Map(ok, uint64_t{1} << 32, 128, 64).status().code(),
            StatusCode::kInvalidArgument);
  // The messages name what is wrong.
  EXPECT_NE(Bf16RowsSw128Map(ok, 64, 12, 64).status().message().find("16"), std::string::npos);
}

TEST(CudaTensorMap, EncodesAValidMapOnAGpu) {
  NW_REQUIRE_GPU();
  Guarded<uint16_t> buf(static_cast<size_t>(300 * 512));
  for (const uint32_t box : {1u, 64u}) {
    const Result<CUtensorMap> map = Bf16RowsSw128Map(buf.get(), 300, 512, box);
    EXPECT_TRUE(map.ok()) << map.status().message();
  }
}

}  // namespace
}  // namespace nw::cuda::testing
