// Sparse attention with sink against cpu::SparseAttention: window and compressed index sets with
// -1 padding, invalid and duplicate indices, queries with no entry, fp32 / bf16 / V4-fp8 KV, the
// SIMT path (fp32 tolerance) and the tensor-core path (bf16 tolerance + cosine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/quant.h"
#include "kernels/quant/quant.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

struct AttnCase {
  int64_t m;
  int n_heads;
  int head_dim;
  int rope_dim;  // V4 fp8 layout
  int window;    // set 0 width (window slots)
  int topk;      // set 1 width (compressed selections)
  KvFormat format;
  bool tensor_cores;         // q in bf16
  bool bf16_values = false;  // q fp32 holding bf16 values: the few-heads tensor-core kernel
  AttentionTcKernel tc_kernel = AttentionTcKernel::kAuto;
};

void RunAttention(const AttnCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "m " << c.m << " heads " << c.n_heads << " dim " << c.head_dim << " window "
               << c.window << " topk " << c.topk << " format " << static_cast<int>(c.format)
               << " tc " << c.tensor_cores << " tc kernel " << static_cast<int>(c.tc_kernel)
               << " seed " << seed);
  Rng rng(seed);
  const int H = c.n_heads, D = c.head_dim;
  const int64_t rows0 = 300, rows1 = 700;  // window buffer and compressed buffer rows
  std::vector<float> kv0 = rng.Vec(static_cast<size_t>(rows0 * D), -1.0f, 1.0f);
  std::vector<float> kv1 = rng.Vec(static_cast<size_t>(rows1 * D), -1.0f, 1.0f);
  std::vector<float> q = rng.Vec(static_cast<size_t>(c.m * H * D), -1.5f, 1.5f);
  std::vector<float> sink = rng.Vec(static_cast<size_t>(H), -2.0f, 2.0f);
  // What the CPU reads: the stored (rounded) KV values and, on the tensor-core path, bf16 q.
  if (c.format == KvFormat::kBf16) {
    quant::FakeQuantBf16(kv0.data(), kv0.data(), kv0.size());
    quant::FakeQuantBf16(kv1.data(), kv1.data(), kv1.size());
  }
  std::vector<float> kv0_cpu = kv0, kv1_cpu = kv1;
  if (c.format == KvFormat::kV4Fp8) {
    for (int64_t r = 0; r < rows0; ++r)
      quant::FakeQuantV4Kv(&kv0[r * D], &kv0_cpu[r * D], D, c.rope_dim);
    for (int64_t r = 0; r < rows1; ++r)
      quant::FakeQuantV4Kv(&kv1[r * D], &kv1_cpu[r * D], D, c.rope_dim);
  }
  if (c.tensor_cores || c.bf16_values) quant::FakeQuantBf16(q.data(), q.data(), q.size());
  if (c.bf16_values) {  // fp32 KV storage holding bf16 values
    quant::FakeQuantBf16(kv0.data(), kv0.data(), kv0.size());
    quant::FakeQuantBf16(kv1.data(), kv1.data(), kv1.size());
    kv0_cpu = kv0;
    kv1_cpu = kv1;
  }

  // Index sets: window rows (consecutive, with -1 at the start of early queries), compressed
  // rows (random, -1 padded, some out of range, some duplicated); lengths vary by query.
  std::vector<int32_t> idx0(static_cast<size_t>(c.m * c.window), -1),
      idx1(static_cast<size_t>(c.m * c.topk), -1);
  std::vector<int32_t> len0(static_cast<size_t>(c.m)), len1(static_cast<size_t>(c.m));
  for (int64_t i = 0; i < c.m; ++i) {
    const int kind = static_cast<int>(i % 5);
    len0[static_cast<size_t>(i)] =
        kind == 4 ? 0 : static_cast<int32_t>(std::min<int64_t>(c.window, 1 + i * 13 % c.window));
    len1[static_cast<size_t>(i)] = kind == 4   ? 0
                                   : kind == 3 ? c.topk
                                               : static_cast<int32_t>(rng.Int(0, c.topk));
    const int64_t start = rng.Int(0, rows0 - c.window);
    for (int j = 0; j < len0[static_cast<size_t>(i)]; ++j) {
      idx0[static_cast<size_t>(i * c.window + j)] =
          (kind == 1 && j < 3) ? -1 : static_cast<int32_t>(start + j);
    }
    for (int j = 0; j < len1[static_cast<size_t>(i)]; ++j) {
      const int64_t r = rng.Int(0, 19);
      idx1[static_cast<size_t>(i * c.topk + j)] =
          r == 0            ? -1
          : r == 1          ? static_cast<int32_t>(rows1 + 5)
          : r == 2 && j > 0 ? idx1[static_cast<size_t>(i * c.topk + j - 1)]
                            : static_cast<int32_t>(rng.Int(0, rows1 - 1));
    }
  }
  if (c.m > 2) {  // a query whose every index is invalid (nothing visible but the sink)
    for (int j = 0; j < c.window; ++j) idx0[static_cast<size_t>(2 * c.window + j)] = -1;
    for (int j = 0; j < c.topk; ++j) idx1[static_cast<size_t>(2 * c.topk + j)] = -1;
    len0[2] = c.window;
    len1[2] = c.topk;
  }

  // CPU reference.
  std::vector<float> want(static_cast<size_t>(c.m * H * D));
  const cpu::SparseAttnParams sp{H, D, static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
  for (int64_t i = 0; i < c.m; ++i) {
    std::vector<const float*> entries;
    for (int j = 0; j < len0[static_cast<size_t>(i)]; ++j) {
      const int32_t r = idx0[static_cast<size_t>(i * c.window + j)];
      if (r >= 0 && r < rows0) entries.push_back(&kv0_cpu[static_cast<size_t>(r) * D]);
    }
    for (int j = 0; j < len1[static_cast<size_t>(i)]; ++j) {
      const int32_t r = idx1[static_cast<size_t>(i * c.topk + j)];
      if (r >= 0 && r < rows1) entries.push_back(&kv1_cpu[static_cast<size_t>(r) * D]);
    }
    std::vector<float> scratch(static_cast<size_t>(H) * (entries.size() + 1));
    cpu::SparseAttention(sp, &q[i * H * D], entries.data(), static_cast<int64_t>(entries.size()),
                         sink.data(), &want[i * H * D], scratch.data());
  }

  // Device buffers in the requested formats.
  Guarded<float> dq32(c.tensor_cores ? std::vector<float>{} : q);
  std::vector<uint16_t> q16;
  if (c.tensor_cores) {
    for (float v : q) q16.push_back(quant::FloatToBf16Bits(v));
  }
  Guarded<uint16_t> dq16(q16);
  Guarded<float> dsink(sink), dout(want.size());
  Guarded<int32_t> didx0(idx0), didx1(idx1), dlen0(len0), dlen1(len1);
  Guarded<float> dkv0f(kv0), dkv1f(kv1);
  std::vector<uint16_t> kv0b, kv1b;
  if (c.format == KvFormat::kBf16) {
    for (float v : kv0) kv0b.push_back(quant::FloatToBf16Bits(v));
    for (float v : kv1) kv1b.push_back(quant::FloatToBf16Bits(v));
  }
  Guarded<uint16_t> dkv0b(kv0b), dkv1b(kv1b);
  const V4KvLayout layout{D, c.rope_dim, 64};
  const int64_t pages0 = (rows0 + 63) / 64, pages1 = (rows1 + 63) / 64;
  Guarded<uint8_t> cache0(
      static_cast<size_t>(c.format == KvFormat::kV4Fp8 ? pages0 * layout.PageBytes() : 0));
  Guarded<uint8_t> cache1(
      static_cast<size_t>(c.format == KvFormat::kV4Fp8 ? pages1 * layout.PageBytes() : 0));
  if (c.format == KvFormat::kV4Fp8) {
    cache0.Fill(0);
    cache1.Fill(0);
    for (int set = 0; set < 2; ++set) {
      const int64_t rows = set == 0 ? rows0 : rows1;
      std::vector<int64_t> slots(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) slots[static_cast<size_t>(r)] = r;
      Guarded<int64_t> dslots(slots);
      StoreV4KvParams st;
      st.x = set == 0 ? dkv0f.get() : dkv1f.get();
      st.slots = dslots.get();
      st.cache = set == 0 ? cache0.get() : cache1.get();
      st.tokens = rows;
      st.num_pages = set == 0 ? pages0 : pages1;
      st.layout = layout;
      NW_ASSERT_OK(LaunchStoreV4Kv(st, nullptr));
      NW_ASSERT_SYNC();
    }
  }
  SparseAttentionParams p;
  p.q =
      c.tensor_cores ? static_cast<const void*>(dq16.get()) : static_cast<const void*>(dq32.get());
  p.q_bf16 = c.tensor_cores;
  p.bf16_values = c.bf16_values;
  p.sink = dsink.get();
  p.out = dout.get();
  p.m = c.m;
  p.n_heads = H;
  p.head_dim = D;
  p.scale = sp.scale;
  p.kv_format = c.format;
  p.kv_layout = layout;
  const void* kvp[2] = {c.format == KvFormat::kFp32   ? static_cast<const void*>(dkv0f.get())
                        : c.format == KvFormat::kBf16 ? static_cast<const void*>(dkv0b.get())
                                                      : static_cast<const void*>(cache0.get()),
                        c.format == KvFormat::kFp32   ? static_cast<const void*>(dkv1f.get())
                        : c.format == KvFormat::kBf16 ? static_cast<const void*>(dkv1b.get())
                                                      : static_cast<const void*>(cache1.get())};
  p.sets[0] = {kvp[0], rows0, didx0.get(), dlen0.get(), c.window};
  p.sets[1] = {kvp[1], rows1, didx1.get(), dlen1.get(), c.topk};
  p.tc_kernel = c.tc_kernel;
  NW_ASSERT_OK(LaunchSparseAttention(p, nullptr));
  NW_ASSERT_SYNC();
  const std::vector<float> got = dout.Download();
  const std::vector<double> want_d(want.begin(), want.end());
  if (c.tensor_cores) {
    // Probabilities are rounded to bf16 for P V: |err| <= 2^-9 * max|kv| per output.
    EXPECT_TRUE(Near(got, want_d, {5e-3, 2e-2}));
    EXPECT_LE(CosineDistance(got, want_d), 1e-4);
  } else {
    EXPECT_TRUE(Near(got, want_d, {2e-5, 1e-4}));
  }
  for (int64_t i = 2; i < c.m; i += 1000) {  // the all-invalid query: exactly zero
    for (int64_t e = 0; e < H * D; ++e) ASSERT_EQ(got[static_cast<size_t>(i * H * D + e)], 0.0f);
  }
  EXPECT_TRUE(dout.GuardsIntact());
  NW_ASSERT_OK(LaunchSparseAttention(p, nullptr));
  NW_ASSERT_SYNC();
  EXPECT_TRUE(BitEqual(dout.Download(), got)) << "run to run";
  // round_bf16: the outputs rounded as stored, the bits of a separate rounding pass.
  p.round_bf16 = true;
  NW_ASSERT_OK(LaunchSparseAttention(p, nullptr));
  NW_ASSERT_SYNC();
  std::vector<float> rounded = got;
  for (float& v : rounded) v = quant::RoundBf16(v);
  EXPECT_TRUE(BitEqual(dout.Download(), rounded)) << "round_bf16";
}

TEST(CudaAttention, SimtFp32AndBf16Kv) {
  NW_REQUIRE_GPU();
  uint64_t seed = 1;
  RunAttention({7, 4, 128, 64, 128, 64, KvFormat::kFp32, false}, seed++);    // the tiny model
  RunAttention({5, 64, 512, 64, 128, 512, KvFormat::kFp32, false}, seed++);  // V4-Flash
  RunAttention({6, 7, 96, 32, 31, 33, KvFormat::kBf16, false}, seed++);      // odd shapes
  RunAttention({3, 1, 4, 0, 1, 1, KvFormat::kFp32, false}, seed++);
  RunAttention({6, 3, 512, 32, 31, 33, KvFormat::kBf16, false}, seed++);  // 4-head blocks, 512
}

TEST(CudaAttention, SimtV4Fp8Kv) {
  NW_REQUIRE_GPU();
  uint64_t seed = 10;
  RunAttention({5, 64, 512, 64, 128, 512, KvFormat::kV4Fp8, false}, seed++);
  RunAttention({7, 4, 128, 64, 128, 64, KvFormat::kV4Fp8, false}, seed++);
}

// The head_dim 512 tensor-core cases on each kernel in turn: V4-Flash's shape (64 heads, window
// 128, top 512), 33 heads (padded rows) with widths ending mid-tile, a one-entry window.
void RunHeadDim512Cases(KvFormat format, std::initializer_list<AttentionTcKernel> kernels,
                        uint64_t& seed) {
  for (AttentionTcKernel k : kernels) {
    for (AttnCase c : {AttnCase{6, 64, 512, 64, 128, 512, format, true},
                       AttnCase{5, 33, 512, 64, 63, 65, format, true},
                       AttnCase{4, 64, 512, 64, 1, 200, format, true}}) {
      c.tc_kernel = k;
      RunAttention(c, seed++);
    }
  }
}

// head_dim 512 with bf16 KV takes the producer-warpgroup kernel; each such case also runs the
// dims-split and the entries-split wgmma kernels (rows by cp.async and by bulk tensor copies) and
// the mma.sync kernel (forced). Window and top-k widths that end mid-tile (64-entry tiles), 33
// heads (padded rows).
TEST(CudaAttention, TensorCoresBf16Kv) {
  NW_REQUIRE_GPU();
  uint64_t seed = 20;
  RunHeadDim512Cases(
      KvFormat::kBf16,
      {AttentionTcKernel::kAuto, AttentionTcKernel::kWgmmaDimsSplit,
       AttentionTcKernel::kWgmmaEntrySplit, AttentionTcKernel::kWgmmaTma, AttentionTcKernel::kMma},
      seed);
  RunAttention({7, 4, 128, 64, 128, 64, KvFormat::kBf16, true}, seed++);
}

TEST(CudaAttention, FewHeadsBf16ValuesOnTensorCores) {
  NW_REQUIRE_GPU();
  uint64_t seed = 40;
  // The tiny model's shape (4 heads x 128, window 128, top 64), 1 to 8 heads, bf16 KV, a
  // 256-entry compressed set (ratio 128: 12 tiles through the two staging buffers), ragged
  // tiles, an odd query count (a block's second warp idle), queries with no entry and with only
  // invalid ones; within SIMT's tolerance of the CPU on the same bf16 values.
  RunAttention({37, 4, 128, 64, 128, 64, KvFormat::kBf16, false, true}, seed++);
  RunAttention({9, 1, 128, 64, 128, 256, KvFormat::kBf16, false, true}, seed++);
  RunAttention({10, 8, 128, 64, 33, 65, KvFormat::kBf16, false, true}, seed++);
  RunAttention({5, 3, 128, 64, 7, 1, KvFormat::kBf16, false, true}, seed++);
  RunAttention({301, 4, 128, 64, 128, 128, KvFormat::kBf16, false, true}, seed++);
  // What it does not take (fp32 KV storage, more heads, another head_dim) runs the SIMT kernel,
  // same contract.
  RunAttention({37, 4, 128, 64, 128, 64, KvFormat::kFp32, false, true}, seed++);
  RunAttention({6, 9, 128, 64, 31, 33, KvFormat::kFp32, false, true}, seed++);
  RunAttention({6, 4, 96, 32, 31, 33, KvFormat::kFp32, false, true}, seed++);
}

// head_dim 512 with 64 rope dims takes the producer-warpgroup kernel (the producer widens the e4m3
// codes to bf16); each such case also runs the mma.sync kernel (forced). head_dim 128 runs
// mma.sync.
TEST(CudaAttention, TensorCoresV4Fp8Kv) {
  NW_REQUIRE_GPU();
  uint64_t seed = 30;
  RunHeadDim512Cases(KvFormat::kV4Fp8, {AttentionTcKernel::kAuto, AttentionTcKernel::kMma}, seed);
  RunAttention({7, 4, 128, 64, 128, 64, KvFormat::kV4Fp8, true}, seed++);
}

// The tensor-core kernels' V4 fp8 widening, value by value: each code under each scale byte
// becomes exactly bf16(DecodeE4M3(code) x DecodeUe8m0(scale)) (the bit path's scales 1 .. 134 and
// the cvt path's 0 and 135 .. 254), bf16 rope values pass unchanged, and rows holding a
// non-finite value (a NaN scale, NaN codes under it, or an infinite product) give NaN like the
// CPU. A query's 512 entries all name one row (q = 0, sink -inf): every P is 1, the output is
// 512 x the row / 512, exact (zeros lose their sign; values of 2^119 and more overflow the sum
// to infinity), and every buffer position of the producer's pipeline (4 pairs:
// both buffers, both halves) widens the row. Rows hold seven 64-code blocks: all 256 codes (the
// NaN codes only under the NaN scale, as StoreV4Kv writes them) for every scale byte.
TEST(CudaAttention, V4Fp8ValuesWidenExactly) {
  NW_REQUIRE_GPU();
  constexpr int D = 512, kRope = 64, kNope = D - kRope, H = 3;
  const V4KvLayout layout{D, kRope, 64};
  // Blocks (scale byte, first code) in row order, seven a row.
  std::vector<std::pair<int, int>> blocks;
  for (int sc = 0; sc < 256; ++sc) {
    for (int c0 = 0; c0 < 256; c0 += 64) blocks.emplace_back(sc, c0);
  }
  const int64_t rows = (static_cast<int64_t>(blocks.size()) + 6) / 7;
  const int64_t pages = (rows + 63) / 64;
  std::vector<uint8_t> cache(static_cast<size_t>(pages * layout.PageBytes()), 0);
  std::vector<float> want(static_cast<size_t>(rows * D));
  std::vector<bool> finite(static_cast<size_t>(rows), true);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* base = cache.data() + (r / 64) * layout.PageBytes();
    uint8_t* data = base + (r % 64) * layout.TokenBytes();
    uint8_t* scales = base + 64 * layout.TokenBytes() + (r % 64) * layout.ScaleStride();
    for (int b = 0; b < 7; ++b) {
      const size_t bi = static_cast<size_t>(r * 7 + b);
      const auto [sc, c0] = bi < blocks.size() ? blocks[bi] : std::make_pair(127, 0);
      scales[b] = static_cast<uint8_t>(sc);
      for (int d = 0; d < 64; ++d) {
        int code = c0 + d;
        if ((code & 0x7F) == 0x7F && sc != 0xFF) code -= 1;  // NaN codes only under a NaN scale
        data[64 * b + d] = static_cast<uint8_t>(code);
        const float v = quant::RoundBf16(quant::DecodeE4M3(static_cast<uint8_t>(code)) *
                                         quant::DecodeUe8m0(static_cast<uint8_t>(sc)));
        want[static_cast<size_t>(r * D + 64 * b + d)] = v;
        if (!std::isfinite(v)) finite[static_cast<size_t>(r)] = false;
      }
    }
    for (int d = 0; d < kRope; ++d) {  // finite bf16 patterns of both signs, subnormals included
      const uint16_t bits = static_cast<uint16_t>(((r * kRope + d) * 40503) & 0xFFFF);
      const uint16_t rope = (bits & 0x7F80) == 0x7F80 ? static_cast<uint16_t>(bits ^ 0x4000) : bits;
      std::memcpy(data + kNope + 2 * d, &rope, 2);
      want[static_cast<size_t>(r * D + kNope + d)] = quant::Bf16BitsToFloat(rope);
    }
  }
  // Query i reads row i through 128 window entries and 384 selected ones.
  const int64_t m = rows;
  std::vector<int32_t> idx0(static_cast<size_t>(m * 128)), idx1(static_cast<size_t>(m * 384));
  for (int64_t i = 0; i < m; ++i) {
    std::fill_n(idx0.begin() + i * 128, 128, static_cast<int32_t>(i));
    std::fill_n(idx1.begin() + i * 384, 384, static_cast<int32_t>(i));
  }
  Guarded<uint8_t> dcache(cache);
  Guarded<int32_t> didx0(idx0), didx1(idx1);
  Guarded<uint16_t> dq(std::vector<uint16_t>(static_cast<size_t>(m * H * D), 0));
  Guarded<float> dsink(std::vector<float>(H, -INFINITY)), dout(static_cast<size_t>(m * H * D));
  for (AttentionTcKernel kernel : {AttentionTcKernel::kAuto, AttentionTcKernel::kMma}) {
    SCOPED_TRACE(::testing::Message() << "tc kernel " << static_cast<int>(kernel));
    SparseAttentionParams p;
    p.q = dq.get();
    p.q_bf16 = true;
    p.sink = dsink.get();
    p.out = dout.get();
    p.m = m;
    p.n_heads = H;
    p.head_dim = D;
    p.scale = 1.0f / std::sqrt(static_cast<float>(D));
    p.kv_format = KvFormat::kV4Fp8;
    p.kv_layout = layout;
    p.sets[0] = {dcache.get(), rows, didx0.get(), nullptr, 128};
    p.sets[1] = {dcache.get(), rows, didx1.get(), nullptr, 384};
    p.tc_kernel = kernel;
    NW_ASSERT_OK(LaunchSparseAttention(p, nullptr));
    NW_ASSERT_SYNC();
    const std::vector<float> got = dout.Download();
    int64_t bad = 0, nan_rows = 0;
    for (int64_t i = 0; i < m; ++i) {
      if (!finite[static_cast<size_t>(i)]) ++nan_rows;
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          const float g = got[static_cast<size_t>((i * H + h) * D + d)];
          // 512 x a value of 2^119 or more overflows to infinity (and stays infinite).
          const float v = want[static_cast<size_t>(i * D + d)], big = v * 512.0f;
          const float w = std::isinf(big) ? big : v;
          // (== : an output sums +0 and the row's values, so a -0 value comes out +0.)
          const bool ok = finite[static_cast<size_t>(i)] ? g == w : std::isnan(g);
          if (!ok && bad++ < 5) {
            ADD_FAILURE() << "row " << i << " head " << h << " dim " << d << ": got " << g
                          << ", want " << (finite[static_cast<size_t>(i)] ? w : NAN);
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(nan_rows, 0);
    EXPECT_LT(nan_rows, m / 2);
    EXPECT_TRUE(dout.GuardsIntact());
  }
}

TEST(CudaAttention, RejectsBadParams) {
  SparseAttentionParams p;
  p.m = 1;
  p.n_heads = 4;
  p.head_dim = 130;
  EXPECT_EQ(LaunchSparseAttention(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.head_dim = 256;
  p.q_bf16 = true;
  float dummy = 0;
  p.q = &dummy;
  p.sink = &dummy;
  p.out = &dummy;
  p.kv_format = KvFormat::kBf16;
  EXPECT_EQ(LaunchSparseAttention(p, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::cuda::testing
