// cuBLASLt linear (y = x W^T, bf16 operands, fp32 accumulation) against cpu::Linear: integer-valued
// inputs make every product and partial sum exact in fp32, so any summation order gives the same
// bits (the CUTLASS testbed's EXACT check); random inputs within a bf16-GEMM tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/blas.h"
#include "kernels/quant/quant.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

void RunLinear(int64_t tokens, int64_t in, int64_t out, bool integers, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " in " << in << " out " << out
                                    << " integers " << integers << " seed " << seed);
  Rng rng(seed);
  auto values = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) {
      x = integers ? static_cast<float>(rng.Int(-4, 4))
                   : quant::RoundBf16(rng.Uniform(-1.0f, 1.0f));
    }
    return v;
  };
  const std::vector<float> x = values(static_cast<size_t>(tokens * in));
  const std::vector<float> w = values(static_cast<size_t>(out * in));
  std::vector<float> want(static_cast<size_t>(tokens * out));
  cpu::Linear(x.data(), tokens, in, w.data(), out, want.data());
  std::vector<uint16_t> xb, wb;
  for (float v : x) xb.push_back(quant::FloatToBf16Bits(v));
  for (float v : w) wb.push_back(quant::FloatToBf16Bits(v));
  Guarded<uint16_t> dx(xb), dw(wb);
  Guarded<float> dy(want.size());
  Guarded<uint16_t> dyb(want.size());
  auto blas = BlasLt::Create();
  NW_ASSERT_OK(blas.status());
  NW_ASSERT_OK(blas->LinearBf16(dx.get(), dw.get(), dy.get(), false, tokens, in, out, nullptr));
  NW_ASSERT_OK(blas->LinearBf16(dx.get(), dw.get(), dyb.get(), true, tokens, in, out, nullptr));
  NW_ASSERT_SYNC();
  const std::vector<float> got = dy.Download();
  std::vector<float> got_b, want_b;
  for (uint16_t b : dyb.Download()) got_b.push_back(quant::Bf16BitsToFloat(b));
  for (float v : want) want_b.push_back(quant::RoundBf16(v));
  if (integers) {
    EXPECT_TRUE(BitEqual(got, want)) << "fp32 out";
    EXPECT_TRUE(BitEqual(got_b, want_b)) << "bf16 out";
  } else {
    // fp32 accumulation of `in` exact products: |err| <= in * 2^-24 * sum|x w| (loose: 1e-5 * in).
    EXPECT_TRUE(Near(got, want, {1e-6 * static_cast<double>(in), 1e-5}));
  }
  EXPECT_TRUE(dy.GuardsIntact());
  EXPECT_TRUE(dyb.GuardsIntact());
  NW_ASSERT_OK(blas->LinearBf16(dx.get(), dw.get(), dy.get(), false, tokens, in, out, nullptr));
  NW_ASSERT_SYNC();
  EXPECT_TRUE(BitEqual(dy.Download(), got)) << "run to run";
}

TEST(CudaBlas, LinearBf16ExactOnIntegers) {
  NW_REQUIRE_GPU();
  RunLinear(1, 8, 1, true, 1);
  RunLinear(7, 64, 33, true, 2);
  RunLinear(129, 4096, 1024, true, 3);
  RunLinear(2, 256, 129280, true, 4);  // a vocabulary-sized head
}

TEST(CudaBlas, LinearBf16RandomWithinTolerance) {
  NW_REQUIRE_GPU();
  RunLinear(33, 1024, 513, false, 5);
}

TEST(CudaBlas, RejectsBadShapes) {
  NW_REQUIRE_GPU();
  auto blas = BlasLt::Create(1 << 20);
  NW_ASSERT_OK(blas.status());
  Guarded<uint16_t> b(64);
  EXPECT_EQ(blas->LinearBf16(b.get(), b.get(), b.get(), true, 1, 6, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::cuda::testing
