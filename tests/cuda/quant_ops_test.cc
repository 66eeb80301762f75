// Quantizers: bit-exact against kernels/quant (the CPU fake quantization and weight packers) and
// against packed bytes built on the host from the scalar codecs of scalar.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/quant.h"
#include "kernels/quant/quant.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

/// Rows of mixed difficulty: wide binades, uniform, zeros and -0, a NaN, an inf, subnormal-tiny,
/// integer-valued (rounding ties after power-of-two scaling), huge.
std::vector<float> QuantInput(int64_t rows, int cols, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * cols;
    const int kind = static_cast<int>((r + static_cast<int64_t>(seed)) % 8);
    for (int c = 0; c < cols; ++c) {
      float v = 0.0f;
      switch (kind) {
        case 0:
          v = rng.Wide();
          break;
        case 1:
          v = rng.Uniform(-1.0f, 1.0f);
          break;
        case 2:
          v = (c % 3 == 0) ? -0.0f : 0.0f;
          break;
        case 3:
          v = rng.Wide();
          break;
        case 4:
          v = rng.Wide();
          break;
        case 5:
          v = std::ldexp(rng.Uniform(-2.0f, 2.0f), static_cast<int>(rng.Int(-140, -118)));
          break;
        case 6:
          v = static_cast<float>(rng.Int(-8, 8)) *
              std::ldexp(1.0f, static_cast<int>(rng.Int(-3, 3)));
          break;
        default:
          v = std::ldexp(rng.Uniform(-2.0f, 2.0f), static_cast<int>(rng.Int(100, 126)));
          break;
      }
      row[c] = v;
    }
    if (kind == 3) row[rng.Int(0, cols - 1)] = std::numeric_limits<float>::quiet_NaN();
    if (kind == 4) row[rng.Int(0, cols - 1)] = (rng.Next() & 1) ? INFINITY : -INFINITY;
  }
  return x;
}

std::vector<float> CpuFakeQuant(const std::vector<float>& x, int64_t rows, int cols, QuantFormat f,
                                int fp8_block, int rope_dim) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    float* yr = y.data() + r * cols;
    const size_t n = static_cast<size_t>(cols);
    switch (f) {
      case QuantFormat::kBf16:
        quant::FakeQuantBf16(xr, yr, n);
        break;
      case QuantFormat::kFp8:
        quant::FakeQuantFp8(xr, yr, n, static_cast<size_t>(fp8_block));
        break;
      case QuantFormat::kMxfp4:
        quant::FakeQuantMxfp4(xr, yr, n);
        break;
      case QuantFormat::kNvfp4:
        quant::FakeQuantNvfp4(xr, yr, n);
        break;
      case QuantFormat::kV4Kv:
        quant::FakeQuantV4Kv(xr, yr, cols, rope_dim);
        break;
    }
  }
  return y;
}

const char* Name(QuantFormat f) {
  switch (f) {
    case QuantFormat::kBf16:
      return "bf16";
    case QuantFormat::kFp8:
      return "fp8";
    case QuantFormat::kMxfp4:
      return "mxfp4";
    case QuantFormat::kNvfp4:
      return "nvfp4";
    case QuantFormat::kV4Kv:
      return "v4kv";
  }
  return "?";
}

struct FakeCase {
  QuantFormat format;
  int64_t rows;
  int cols;
  int fp8_block;
  int rope_dim;
};

std::vector<FakeCase> FakeCases() {
  std::vector<FakeCase> cases;
  const std::vector<std::pair<int64_t, int>> shapes = {{1, 1},   {3, 7},   {5, 16},  {4, 31},
                                                       {6, 32},  {7, 33},  {9, 64},  {8, 127},
                                                       {8, 128}, {8, 129}, {5, 257}, {16, 4096}};
  for (const auto& [rows, cols] : shapes) {
    cases.push_back({QuantFormat::kBf16, rows, cols, 0, 0});
    for (int block : {128, 64, 0, 7}) cases.push_back({QuantFormat::kFp8, rows, cols, block, 0});
    cases.push_back({QuantFormat::kMxfp4, rows, cols, 0, 0});
    cases.push_back({QuantFormat::kNvfp4, rows, cols, 0, 0});
  }
  for (const auto& [rows, cols, rope] : std::vector<std::tuple<int64_t, int, int>>{
           {7, 512, 64}, {3, 128, 64}, {2, 64, 0}, {5, 192, 0}, {1, 66, 2}, {9, 64, 64}}) {
    cases.push_back({QuantFormat::kV4Kv, rows, cols, 0, rope});
  }
  return cases;
}

TEST(CudaQuant, FakeQuantMatchesCpuBitExact) {
  NW_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const FakeCase& c : FakeCases()) {
    SCOPED_TRACE(::testing::Message()
                 << Name(c.format) << " rows " << c.rows << " cols " << c.cols << " block "
                 << c.fp8_block << " rope " << c.rope_dim << " seed " << seed);
    const std::vector<float> x = QuantInput(c.rows, c.cols, seed++);
    const std::vector<float> want =
        CpuFakeQuant(x, c.rows, c.cols, c.format, c.fp8_block, c.rope_dim);
    // Out of place, with a padded output stride.
    const int64_t ys = c.cols + 3;
    Guarded<float> dx(x), dy(static_cast<size_t>(c.rows * ys));
    NW_ASSERT_OK(dx.status());
    NW_ASSERT_OK(dy.status());
    FakeQuantParams p;
    p.x = dx.get();
    p.y = dy.get();
    p.rows = c.rows;
    p.cols = c.cols;
    p.y_stride = ys;
    p.format = c.format;
    p.fp8_block = c.fp8_block;
    p.rope_dim = c.rope_dim;
    NW_ASSERT_OK(LaunchFakeQuant(p, nullptr));
    NW_ASSERT_SYNC();
    const std::vector<float> y = dy.Download();
    std::vector<float> got(want.size()), pad;
    for (int64_t r = 0; r < c.rows; ++r) {
      std::copy_n(y.begin() + r * ys, c.cols, got.begin() + r * c.cols);
      pad.insert(pad.end(), y.begin() + r * ys + c.cols, y.begin() + (r + 1) * ys);
    }
    EXPECT_TRUE(BitEqual(got, want));
    for (float v : pad) ASSERT_TRUE(std::isnan(v)) << "stride padding was written";
    EXPECT_TRUE(dy.GuardsIntact());
    EXPECT_TRUE(dx.GuardsIntact());
    // In place, twice from the same input: bitwise run-to-run determinism.
    Guarded<float> dz(x);
    p.x = dz.get();
    p.y = dz.get();
    p.y_stride = 0;
    NW_ASSERT_OK(LaunchFakeQuant(p, nullptr));
    NW_ASSERT_SYNC();
    const std::vector<float> first = dz.Download();
    EXPECT_TRUE(BitEqual(first, want)) << "in place";
    dz.Upload(x);
    NW_ASSERT_OK(LaunchFakeQuant(p, nullptr));
    NW_ASSERT_SYNC();
    const std::vector<float> second = dz.Download();
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0)
        << "run-to-run bits differ";
    EXPECT_TRUE(dz.GuardsIntact());
  }
}

TEST(CudaQuant, RejectsBadParams) {
  FakeQuantParams p;
  p.rows = 1;
  p.cols = 64;
  float dummy = 0;
  p.x = &dummy;
  p.y = &dummy;
  p.x_stride = 32;
  EXPECT_EQ(LaunchFakeQuant(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.x_stride = 0;
  p.format = QuantFormat::kV4Kv;
  p.rope_dim = 3;
  EXPECT_EQ(LaunchFakeQuant(p, nullptr).code(), StatusCode::kInvalidArgument);
  PackParams pk;
  pk.rows = 1;
  pk.cols = 33;
  pk.format = PackedFormat::kMxfp4;
  EXPECT_EQ(LaunchPack(pk, nullptr).code(), StatusCode::kInvalidArgument);
  V4KvLayout l;
  l.head_dim = 100;
  EXPECT_EQ(l.Validate().code(), StatusCode::kInvalidArgument);
}

// ---- Packed formats -----------------------------------------------------------------------------

float HostAbsMax(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) return quant::QuietNan();
    m = std::max(m, a);
  }
  return m;
}

struct Packed {
  std::vector<uint8_t> codes, scales;
  std::vector<float> global;
};

/// Host packing from the scalar codecs (the layout of quant.h's PackParams).
Packed HostPack(const std::vector<float>& x, int64_t rows, int cols, PackedFormat f, int block) {
  Packed p;
  if (f == PackedFormat::kFp8) {
    const int b = block > 0 ? block : std::max(cols, 1);
    const int nb = (cols + b - 1) / b;
    p.codes.resize(static_cast<size_t>(rows * cols));
    p.scales.resize(static_cast<size_t>(rows * nb));
    for (int64_t r = 0; r < rows; ++r) {
      for (int j = 0; j < nb; ++j) {
        const int len = std::min(b, cols - j * b);
        const float* xb = x.data() + r * cols + j * b;
        const uint8_t byte =
            quant::Ue8m0ScaleFor(HostAbsMax(xb, static_cast<size_t>(len)), quant::kE4M3Max);
        p.scales[static_cast<size_t>(r * nb + j)] = byte;
        for (int c = 0; c < len; ++c) {
          p.codes[static_cast<size_t>(r * cols + j * b + c)] =
              quant::EncodeE4M3(xb[c] / quant::DecodeUe8m0(byte));
        }
      }
    }
    return p;
  }
  const int b = f == PackedFormat::kMxfp4 ? 32 : 16;
  const int nb = (cols + b - 1) / b;
  p.codes.assign(static_cast<size_t>(rows * cols / 2), 0);
  p.scales.assign(static_cast<size_t>(rows * nb), 0);
  p.global.assign(static_cast<size_t>(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    std::vector<uint8_t> code(static_cast<size_t>(cols), 0);
    if (f == PackedFormat::kMxfp4) {
      for (int j = 0; j < nb; ++j) {
        const int len = std::min(b, cols - j * b);
        const uint8_t byte =
            quant::Ue8m0ScaleFor(HostAbsMax(xr + j * b, static_cast<size_t>(len)), quant::kE2M1Max);
        p.scales[static_cast<size_t>(r * nb + j)] = byte;
        for (int c = 0; c < len; ++c)
          code[static_cast<size_t>(j * b + c)] =
              quant::EncodeE2M1(xr[j * b + c] / quant::DecodeUe8m0(byte));
      }
    } else {
      const float amax = HostAbsMax(xr, static_cast<size_t>(cols));
      const bool non_finite = !std::isfinite(amax);
      const float g = non_finite ? quant::QuietNan() : amax / (quant::kE4M3Max * quant::kE2M1Max);
      p.global[static_cast<size_t>(r)] = g;
      for (int j = 0; j < nb && !non_finite; ++j) {
        const int len = std::min(b, cols - j * b);
        uint8_t byte = 0;
        if (g != 0.0f)
          byte = quant::EncodeE4M3(HostAbsMax(xr + j * b, static_cast<size_t>(len)) /
                                   (quant::kE2M1Max * g));
        p.scales[static_cast<size_t>(r * nb + j)] = byte;
        const float sb = quant::DecodeE4M3(byte);
        for (int c = 0; c < len; ++c) {
          const float v = xr[j * b + c];
          code[static_cast<size_t>(j * b + c)] = (g == 0.0f || sb == 0.0f)
                                                     ? (std::signbit(v) ? 0x8 : 0x0)
                                                     : quant::EncodeE2M1(v / (sb * g));
        }
      }
    }
    for (int c = 0; c < cols; c += 2) {
      p.codes[static_cast<size_t>(r * cols / 2 + c / 2)] = static_cast<uint8_t>(
          code[static_cast<size_t>(c)] | (code[static_cast<size_t>(c + 1)] << 4));
    }
  }
  return p;
}

TEST(CudaQuant, PackUnpackBitExact) {
  NW_REQUIRE_GPU();
  uint64_t seed = 500;
  struct Case {
    PackedFormat f;
    int block;
    int64_t rows;
    int cols;
  };
  std::vector<Case> cases;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int>>{
           {1, 2}, {3, 30}, {4, 32}, {5, 34}, {8, 64}, {9, 126}, {7, 128}, {6, 130}, {16, 4096}}) {
    for (int block : {128, 64, 0}) cases.push_back({PackedFormat::kFp8, block, rows, cols});
    cases.push_back({PackedFormat::kMxfp4, 0, rows, cols});
    cases.push_back({PackedFormat::kNvfp4, 0, rows, cols});
  }
  cases.push_back({PackedFormat::kFp8, 5, 3, 11});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "format " << static_cast<int>(c.f) << " block " << c.block << " rows " << c.rows
                 << " cols " << c.cols << " seed " << seed);
    const std::vector<float> x = QuantInput(c.rows, c.cols, seed++);
    const Packed want = HostPack(x, c.rows, c.cols, c.f, c.block);
    Guarded<float> dx(x);
    Guarded<uint8_t> dcodes(want.codes.size()), dscales(want.scales.size());
    Guarded<float> dglobal(std::max<size_t>(want.global.size(), 1));
    PackParams p;
    p.x = dx.get();
    p.codes = dcodes.get();
    p.scales = dscales.get();
    p.global = dglobal.get();
    p.rows = c.rows;
    p.cols = c.cols;
    p.format = c.f;
    p.fp8_block = c.block;
    NW_ASSERT_OK(LaunchPack(p, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(SameBytes(dcodes.Download(), want.codes)) << "codes";
    EXPECT_TRUE(SameBytes(dscales.Download(), want.scales)) << "scales";
    if (c.f == PackedFormat::kNvfp4) {
      EXPECT_TRUE(BitEqual(dglobal.Download(), want.global));
    }
    if (c.f == PackedFormat::kMxfp4) {
      // The checkpoint writer of kernels/quant packs FP4 weights in the same layout.
      std::vector<uint8_t> w(want.codes.size()), s(want.scales.size());
      quant::QuantizeFp4Weight(x.data(), c.rows, c.cols, w.data(), s.data());
      EXPECT_TRUE(SameBytes(dcodes.Download(), w)) << "vs QuantizeFp4Weight";
      EXPECT_TRUE(SameBytes(dscales.Download(), s)) << "vs QuantizeFp4Weight scales";
    }
    // Unpack gives exactly the CPU's fake quantization.
    Guarded<float> dy(x.size());
    UnpackParams u;
    u.codes = dcodes.get();
    u.scales = dscales.get();
    u.global = dglobal.get();
    u.y = dy.get();
    u.rows = c.rows;
    u.cols = c.cols;
    u.format = c.f;
    u.fp8_block = c.block;
    NW_ASSERT_OK(LaunchUnpack(u, nullptr));
    NW_ASSERT_SYNC();
    const QuantFormat ff = c.f == PackedFormat::kFp8     ? QuantFormat::kFp8
                           : c.f == PackedFormat::kMxfp4 ? QuantFormat::kMxfp4
                                                         : QuantFormat::kNvfp4;
    EXPECT_TRUE(BitEqual(dy.Download(), CpuFakeQuant(x, c.rows, c.cols, ff, c.block, 0)))
        << "unpack";
    for (auto* g : {&dcodes, &dscales}) EXPECT_TRUE(g->GuardsIntact());
    EXPECT_TRUE(dglobal.GuardsIntact());
    EXPECT_TRUE(dy.GuardsIntact());
  }
}

TEST(CudaQuant, PackBf16BitExact) {
  NW_REQUIRE_GPU();
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int>>{{1, 1}, {7, 33}, {64, 512}}) {
    const std::vector<float> x = QuantInput(rows, cols, 900 + static_cast<uint64_t>(cols));
    std::vector<uint16_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = quant::FloatToBf16Bits(x[i]);
    Guarded<float> dx(x);
    Guarded<uint16_t> dy(x.size());
    PackBf16Params p;
    p.x = dx.get();
    p.y = dy.get();
    p.rows = rows;
    p.cols = cols;
    NW_ASSERT_OK(LaunchPackBf16(p, nullptr));
    NW_ASSERT_SYNC();
    const std::vector<uint16_t> got = dy.Download();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0u) << "rows " << rows << " cols " << cols;
    EXPECT_TRUE(dy.GuardsIntact());
  }
}

/// The page image of quant.h's V4 layout built on the host from the scalar codecs.
std::vector<uint8_t> HostV4Pages(const std::vector<float>& x, const std::vector<int64_t>& slots,
                                 const V4KvLayout& l, int64_t pages) {
  std::vector<uint8_t> img(static_cast<size_t>(pages * l.PageBytes()), 0);
  for (size_t t = 0; t < slots.size(); ++t) {
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= pages * l.page_size) continue;
    uint8_t* base = img.data() + (slot / l.page_size) * l.PageBytes();
    const int64_t off = slot % l.page_size;
    uint8_t* data = base + off * l.TokenBytes();
    uint8_t* scales = base + l.page_size * l.TokenBytes() + off * l.ScaleStride();
    const float* xt = x.data() + t * static_cast<size_t>(l.head_dim);
    for (int b = 0; b < l.scale_count(); ++b) {
      const uint8_t byte = quant::Ue8m0ScaleFor(HostAbsMax(xt + 64 * b, 64), quant::kE4M3Max);
      scales[b] = byte;
      for (int c = 0; c < 64; ++c)
        data[64 * b + c] = quant::EncodeE4M3(xt[64 * b + c] / quant::DecodeUe8m0(byte));
    }
    for (int c = 0; c < l.rope_dim; ++c) {
      const uint16_t bits = quant::FloatToBf16Bits(xt[l.nope() + c]);
      std::memcpy(data + l.nope() + 2 * c, &bits, 2);
    }
  }
  return img;
}

TEST(CudaQuant, V4KvCacheStoreLoadBitExact) {
  NW_REQUIRE_GPU();
  for (const V4KvLayout l :
       {V4KvLayout{512, 64, 64}, V4KvLayout{128, 64, 64}, V4KvLayout{192, 0, 7}}) {
    SCOPED_TRACE(::testing::Message()
                 << "layout " << l.head_dim << "/" << l.rope_dim << "/" << l.page_size);
    const int64_t pages = 3, tokens = 2 * l.page_size + 5;
    if (l.head_dim == 512) {
      EXPECT_EQ(l.TokenBytes(), 576);
      EXPECT_EQ(l.ScaleStride(), 8);
      EXPECT_EQ(l.PageBytes(), 37440);  // 64 * 584 = 37376, padded to 65 * 576
    }
    const std::vector<float> x = QuantInput(tokens, l.head_dim, 77);
    std::vector<int64_t> slots(static_cast<size_t>(tokens));
    Rng rng(78);
    for (int64_t t = 0; t < tokens; ++t) {
      // Scattered slots (a permutation of most of the cache), one -1 and one past the end.
      slots[static_cast<size_t>(t)] = (t * 37 + 11) % (pages * l.page_size);
    }
    slots[3] = -1;
    slots[5] = pages * l.page_size + 2;
    Guarded<float> dx(x);
    Guarded<int64_t> dslots(slots);
    Guarded<uint8_t> cache(static_cast<size_t>(pages * l.PageBytes()));
    cache.Fill(0);
    StoreV4KvParams s;
    s.x = dx.get();
    s.slots = dslots.get();
    s.cache = cache.get();
    s.tokens = tokens;
    s.num_pages = pages;
    s.layout = l;
    NW_ASSERT_OK(LaunchStoreV4Kv(s, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(SameBytes(cache.Download(), HostV4Pages(x, slots, l, pages))) << "page bytes";
    EXPECT_TRUE(cache.GuardsIntact());
    Guarded<float> dy(x.size());
    LoadV4KvParams ld;
    ld.cache = cache.get();
    ld.slots = dslots.get();
    ld.y = dy.get();
    ld.tokens = tokens;
    ld.num_pages = pages;
    ld.layout = l;
    NW_ASSERT_OK(LaunchLoadV4Kv(ld, nullptr));
    NW_ASSERT_SYNC();
    std::vector<float> want =
        CpuFakeQuant(x, tokens, l.head_dim, QuantFormat::kV4Kv, 0, l.rope_dim);
    for (int64_t t : {int64_t{3}, int64_t{5}}) {
      std::fill_n(want.begin() + t * l.head_dim, l.head_dim, 0.0f);
    }
    EXPECT_TRUE(BitEqual(dy.Download(), want)) << "load";
    EXPECT_TRUE(dy.GuardsIntact());
  }
}

}  // namespace
}  // namespace nw::cuda::testing
