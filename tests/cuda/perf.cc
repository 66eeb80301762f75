// Perf mode (see perf.h and docs/cuda.md): CUDA-event timings, warm-up first, median of repeated
// launches, inputs random (never zeros) and larger than the 60 MB L2 where the real workload is.
#include "tests/cuda/perf.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/indexer.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/topk.h"
#include "kernels/quant/scalar.h"

namespace nw::cuda::testing {
namespace {

// Ceilings of one H200 as measured on this workplace's machines (KINDS.md): a device-to-device
// copy moves ~4.3 TB/s (read + write); a large bf16 GEMM runs at ~790 TFLOP/s. The copy is
// re-measured below in the same run.
constexpr double kPeakTflops = 790.0;

struct Fast {  // xorshift64*, for filling hundreds of MB quickly
  uint64_t s;
  uint64_t Next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float Unit() { return static_cast<float>(Next() >> 40) * 0x1p-23f - 1.0f; }  // [-1, 1)
};

template <typename T>
DeviceBuffer<T> Upload(const std::vector<T>& host) {
  auto r = DeviceBuffer<T>::Allocate(host.size());
  if (!r.ok()) {
    std::fprintf(stderr, "perf: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  DeviceBuffer<T> b = std::move(r).value();
  const Status s = b.CopyFromHost(host.data(), host.size());
  if (!s.ok()) {
    std::fprintf(stderr, "perf: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  return b;
}

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
  Fast f{seed * 0x9E3779B97F4A7C15ull + 1};
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = quant::FloatToBf16Bits(f.Unit());
  return v;
}

std::vector<float> RandomF32(size_t n, uint64_t seed, float scale = 1.0f) {
  Fast f{seed * 0x9E3779B97F4A7C15ull + 7};
  std::vector<float> v(n);
  for (auto& x : v) x = scale * f.Unit();
  return v;
}

/// Median milliseconds of `iters` launches after `warmup` launches; -1 on a launch error.
double TimeMs(const std::function<Status()>& launch, int warmup = 3, int iters = 15) {
  for (int i = 0; i < warmup; ++i) {
    const Status s = launch();
    if (!s.ok()) {
      std::fprintf(stderr, "perf: launch failed: %s\n", s.ToString().c_str());
      return -1.0;
    }
  }
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(a, nullptr);
    const Status s = launch();
    cudaEventRecord(b, nullptr);
    if (!s.ok()) return -1.0;
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "perf: %s\n", cudaGetErrorString(err));
    return -1.0;
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Prints one case: time, TFLOP/s and GB/s, each with its share of the ceiling (the copy
/// bandwidth as PerfCopy measured it in this run).
struct Reporter {
  double bandwidth_gbs = 4300.0;

  void operator()(const char* name, double ms, double flops, double bytes) const {
    if (ms <= 0) {
      std::printf("%-34s FAILED\n", name);
      return;
    }
    const double tflops = flops / (ms * 1e-3) / 1e12;
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-34s %10.3f ms %9.1f TFLOP/s (%5.1f%% of %3.0f) %9.1f GB/s (%5.1f%% of %4.0f)\n",
                name, ms, tflops, 100.0 * tflops / kPeakTflops, kPeakTflops, gbs,
                100.0 * gbs / bandwidth_gbs, bandwidth_gbs);
    std::fflush(stdout);
  }
};

/// Whether the case `name` runs: no filter, or one of the filter's '|'-separated substrings
/// occurs in the name.
bool Want(const std::string& filter, const char* name) {
  if (filter.empty()) return true;
  const std::string n = name;
  size_t start = 0;
  while (true) {
    const size_t bar = filter.find('|', start);
    const std::string part = filter.substr(start, bar == std::string::npos ? bar : bar - start);
    if (!part.empty() && n.find(part) != std::string::npos) return true;
    if (bar == std::string::npos) return false;
    start = bar + 1;
  }
}

/// The copy ceiling: sets report.bandwidth_gbs for the cases after it.
void PerfCopy(Reporter& report) {
  const size_t bytes = size_t{4} << 30;
  auto a = DeviceBuffer<uint8_t>::Allocate(bytes);
  auto b = DeviceBuffer<uint8_t>::Allocate(bytes);
  if (!a.ok() || !b.ok()) return;
  cudaMemset(a->data(), 1, bytes);
  const double ms = TimeMs(
      [&] {
        return CudaStatus(
            cudaMemcpyAsync(b->data(), a->data(), bytes, cudaMemcpyDeviceToDevice, nullptr),
            "cudaMemcpyAsync", __FILE__, __LINE__);
      },
      2, 5);
  if (ms > 0) report.bandwidth_gbs = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  report("d2d copy 4 GiB (ceiling)", ms, 0, 2.0 * static_cast<double>(bytes));
}

/// The tensor-core ceiling in the same run: an 8192^3 bf16 GEMM through cuBLASLt.
void PerfGemm(const Reporter& report) {
  const int64_t n = 8192;
  auto x = Upload(RandomBf16(static_cast<size_t>(n * n), 30));
  auto w = Upload(RandomBf16(static_cast<size_t>(n * n), 31));
  auto y = DeviceBuffer<uint16_t>::Allocate(static_cast<size_t>(n * n));
  auto blas = BlasLt::Create();
  if (!y.ok() || !blas.ok()) return;
  const double ms = TimeMs(
      [&] { return blas->LinearBf16(x.data(), w.data(), y->data(), true, n, n, n, nullptr); }, 3,
      10);
  report("cublasLt bf16 gemm 8192^3 (ceiling)", ms, 2.0 * n * n * n, 3.0 * n * n * 2);
}

// ---- Indexer logits: 64 heads x 128 -------------------------------------------------------------

/// The decode kernel's 64-key tiles per block and pipeline stages against the launcher's choice
/// (above).
void SweepDecodeTiles(const Reporter& report, const char* base, IndexerLogitsParams p, double flops,
                      double bytes) {
  for (const int stages : {4, 3, 2}) {
    for (const int per : {8, 16, 32, 64}) {
      p.decode_tiles_per_block = per;
      p.decode_stages = stages;
      const std::string name = std::string(base) + ", " + std::to_string(per) + " tiles a block, " +
                               std::to_string(stages) + " stages";
      report(name.c_str(), TimeMs([&] { return LaunchIndexerLogits(p, nullptr); }), flops, bytes);
    }
  }
}

void PerfIndexer(const Reporter& report, const std::string& filter) {
  const int H = 64, D = 128;
  {  // Decode: 64 requests, 32768 compressed keys each (131072 tokens), paged, distinct pages.
    const int64_t m = 64, len = 32768, page = 64, pages_per = len / page;
    const int64_t rows = m * len;
    auto q = Upload(RandomBf16(static_cast<size_t>(m * H * D), 1));
    auto w = Upload(RandomF32(static_cast<size_t>(m * H), 2, 0.01f));
    std::vector<int32_t> table(static_cast<size_t>(m * pages_per));
    std::iota(table.begin(), table.end(), 0);
    std::vector<int32_t> qrow(static_cast<size_t>(m)),
        lens(static_cast<size_t>(m), static_cast<int32_t>(len));
    std::iota(qrow.begin(), qrow.end(), 0);
    auto dtable = Upload(table);
    auto dqrow = Upload(qrow);
    auto dlens = Upload(lens);
    auto out = DeviceBuffer<float>::Allocate(static_cast<size_t>(m * len));
    IndexerLogitsParams p;
    p.q = q.data();
    p.w = w.data();
    p.m = m;
    p.n_heads = H;
    p.head_dim = D;
    p.key_rows = rows;
    p.block_table = dtable.data();
    p.block_table_stride = pages_per;
    p.query_row = dqrow.data();
    p.lengths = dlens.data();
    p.page_size = static_cast<int>(page);
    p.out = out->data();
    p.out_cols = len;
    const double flops = 2.0 * m * len * H * D;
    if (Want(filter, "indexer decode bf16 paged")) {
      auto k = Upload(RandomBf16(static_cast<size_t>(rows * D), 3));
      p.k = k.data();
      p.k_format = IndexerKeyFormat::kBf16;
      report("indexer decode bf16 paged", TimeMs([&] { return LaunchIndexerLogits(p, nullptr); }),
             flops, m * len * (2.0 * D + 4.0));
      SweepDecodeTiles(report, "indexer decode bf16 paged", p, flops, m * len * (2.0 * D + 4.0));
      IndexerLogitsParams mma = p;  // kAuto takes the wgmma kernel
      mma.decode_kernel = IndexerDecodeKernel::kMma;
      report("indexer decode bf16 paged, mma.sync",
             TimeMs([&] { return LaunchIndexerLogits(mma, nullptr); }), flops,
             m * len * (2.0 * D + 4.0));
    }
    if (Want(filter, "indexer decode fp8 paged")) {
      Fast f{11};
      std::vector<uint8_t> k8(static_cast<size_t>(rows * D));
      for (auto& b : k8) b = static_cast<uint8_t>(f.Next() >> 56) & 0xBE;  // no NaN codes
      auto k = Upload(k8);
      std::vector<float> sc(static_cast<size_t>(rows), 0.0078125f);
      auto ks = Upload(sc);
      p.k = k.data();
      p.k_scale = ks.data();
      p.k_format = IndexerKeyFormat::kFp8;
      report("indexer decode fp8 paged", TimeMs([&] { return LaunchIndexerLogits(p, nullptr); }),
             flops, m * len * (D + 4.0 + 4.0));
      SweepDecodeTiles(report, "indexer decode fp8 paged", p, flops, m * len * (D + 4.0 + 4.0));
      IndexerLogitsParams mma = p;
      mma.decode_kernel = IndexerDecodeKernel::kMma;
      report("indexer decode fp8 paged, mma.sync",
             TimeMs([&] { return LaunchIndexerLogits(mma, nullptr); }), flops,
             m * len * (D + 4.0 + 4.0));
      // The wgmma kernel's bf16 path (e4m3 widened to bf16): head 0 of every query times 2^30,
      // which no power-of-two scale brings into f16 together with the other heads.
      std::vector<uint16_t> qwide = RandomBf16(static_cast<size_t>(m * H * D), 1);
      for (int64_t i = 0; i < m; ++i) {
        for (int e = 0; e < D; ++e) {
          uint16_t& b = qwide[static_cast<size_t>(i * H * D + e)];
          if ((b & 0x7F80u) != 0u) b = static_cast<uint16_t>(b + (30u << 7));
        }
      }
      auto qw = Upload(qwide);
      IndexerLogitsParams wide = p;
      wide.q = qw.data();
      report("indexer decode fp8 paged, wgmma bf16 path",
             TimeMs([&] { return LaunchIndexerLogits(wide, nullptr); }), flops,
             m * len * (D + 4.0 + 4.0));
    }
  }
  {  // Prefill: 4096 queries over 16384 keys (a 64K-token request), contiguous.
    const int64_t n = 16384;
    for (const int64_t m : {int64_t{4096}, int64_t{256}}) {
      const bool exact = m == 256;
      const char* name = exact ? "indexer prefill fp32 exact" : "indexer prefill bf16";
      if (!Want(filter, name)) continue;
      std::vector<int32_t> ks(static_cast<size_t>(m), 0),
          ke(static_cast<size_t>(m), static_cast<int32_t>(n));
      auto dks = Upload(ks);
      auto dke = Upload(ke);
      auto w = Upload(RandomF32(static_cast<size_t>(m * H), 5, 0.01f));
      auto out = DeviceBuffer<float>::Allocate(static_cast<size_t>(m * n));
      auto q16 = Upload(RandomBf16(static_cast<size_t>(m * H * D), 6));
      auto k16 = Upload(RandomBf16(static_cast<size_t>(n * D), 7));
      auto q32 = Upload(RandomF32(static_cast<size_t>(m * H * D), 8));
      auto k32 = Upload(RandomF32(static_cast<size_t>(n * D), 9));
      IndexerLogitsParams p;
      p.q = exact ? static_cast<const void*>(q32.data()) : static_cast<const void*>(q16.data());
      p.k = exact ? static_cast<const void*>(k32.data()) : static_cast<const void*>(k16.data());
      p.k_format = exact ? IndexerKeyFormat::kFp32 : IndexerKeyFormat::kBf16;
      p.w = w.data();
      p.m = m;
      p.n_heads = H;
      p.head_dim = D;
      p.key_rows = n;
      p.ks = dks.data();
      p.ke = dke.data();
      p.out = out->data();
      p.out_cols = n;
      report(name, TimeMs([&] { return LaunchIndexerLogits(p, nullptr); }, 2, exact ? 3 : 10),
             2.0 * m * n * H * D, m * n * 4.0 + n * D * (exact ? 4.0 : 2.0));
      if (!exact) {  // the mma.sync grouped kernel, the baseline of the wgmma one above
        p.prefill_kernel = IndexerPrefillKernel::kMma;
        report("indexer prefill bf16 mma.sync",
               TimeMs([&] { return LaunchIndexerLogits(p, nullptr); }, 2, 10), 2.0 * m * n * H * D,
               m * n * 4.0 + n * D * 2.0);
      }
    }
  }
}

// ---- Top-k: k = 512 (V4-Flash), and k = 64 over 4,096 entries (tiny-v4's prefill at 16K) -------

void PerfTopK(const Reporter& report, const std::string& filter) {
  struct Shape {
    const char* name;
    int64_t rows;
    int64_t n;
    int k;
  };
  for (const Shape& s : {Shape{"topk prefill 4096 x 16384", 4096, 16384, 512},
                         Shape{"topk decode 64 x 262144", 64, 262144, 512},
                         Shape{"topk 1 x 1048576", 1, 1 << 20, 512},
                         Shape{"topk k64 prefill 16384 x 4096", 16384, 4096, 64}}) {
    if (!Want(filter, s.name)) continue;
    auto scores = Upload(RandomF32(static_cast<size_t>(s.rows * s.n), 12, 100.0f));
    auto out = DeviceBuffer<int32_t>::Allocate(static_cast<size_t>(s.rows * s.k));
    TopKParams p;
    p.scores = scores.data();
    p.out = out->data();
    p.rows = s.rows;
    p.n = s.n;
    p.k = s.k;
    report(s.name, TimeMs([&] { return LaunchTopK(p, nullptr); }), 0, s.rows * s.n * 4.0);
    if (s.k <= kTopKWarpMaxK) {  // the resident kernel on the warp kernel's rows
      p.path = TopKPath::kResident;
      report((std::string(s.name) + ", resident").c_str(),
             TimeMs([&] { return LaunchTopK(p, nullptr); }), 0, s.rows * s.n * 4.0);
    }
  }
}

// ---- Sparse attention: 64 heads x 512, 128 window + 512 selected --------------------------------

void PerfAttention(const Reporter& report, const std::string& filter) {
  const int H = 64, D = 512, W = 128, K = 512;
  const int64_t rows = 65536;  // KV pool (64 MiB bf16), indices random
  auto kv16 = Upload(RandomBf16(static_cast<size_t>(rows * D), 20));
  auto sink = Upload(RandomF32(static_cast<size_t>(H), 21));
  // The same pool in the V4 fp8 layout (random bytes with valid codes and moderate scales).
  const V4KvLayout layout{D, 64, 64};
  const int64_t pages = rows / 64;
  std::vector<uint8_t> img(static_cast<size_t>(pages * layout.PageBytes()));
  Fast f{22};
  for (auto& b : img) b = static_cast<uint8_t>(f.Next() >> 56) & 0x3E;
  for (int64_t pg = 0; pg < pages; ++pg) {
    for (int t = 0; t < 64; ++t) {
      uint8_t* sc = img.data() + pg * layout.PageBytes() + 64 * layout.TokenBytes() +
                    t * layout.ScaleStride();
      for (int j = 0; j < 8; ++j) sc[j] = j < 7 ? 120 : 0;
    }
  }
  auto kv8 = Upload(img);
  for (const int64_t m : {int64_t{2048}, int64_t{64}, int64_t{256}}) {
    Fast g{static_cast<uint64_t>(m)};
    std::vector<int32_t> i0(static_cast<size_t>(m * W)), i1(static_cast<size_t>(m * K));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t start = static_cast<int64_t>(g.Next() % static_cast<uint64_t>(rows - W));
      for (int j = 0; j < W; ++j)
        i0[static_cast<size_t>(i * W + j)] = static_cast<int32_t>(start + j);
      for (int j = 0; j < K; ++j)
        i1[static_cast<size_t>(i * K + j)] =
            static_cast<int32_t>(g.Next() % static_cast<uint64_t>(rows));
    }
    auto d0 = Upload(i0);
    auto d1 = Upload(i1);
    // The same queries over the first 4,096 rows only (4 MiB: every gather hits L2), to separate
    // the kernel's compute from its memory latency.
    for (auto& v : i0) v %= 4096;
    for (auto& v : i1) v %= 4096;
    auto d0_l2 = Upload(i0);
    auto d1_l2 = Upload(i1);
    auto q16 = Upload(RandomBf16(static_cast<size_t>(m * H * D), 23));
    auto q32 = Upload(RandomF32(static_cast<size_t>(m * H * D), 24));
    auto out = DeviceBuffer<float>::Allocate(static_cast<size_t>(m * H * D));
    SparseAttentionParams p;
    p.sink = sink.data();
    p.out = out->data();
    p.m = m;
    p.n_heads = H;
    p.head_dim = D;
    p.scale = 1.0f / std::sqrt(static_cast<float>(D));
    p.kv_layout = layout;
    const double flops = 4.0 * m * H * (W + K) * D;
    struct Variant {
      const char* tag;
      KvFormat f;
      bool tc;
      double row_bytes;
    };
    for (const Variant& v :
         {Variant{"bf16 kv, tensor cores", KvFormat::kBf16, true, 2.0 * D},
          Variant{"bf16 kv, wgmma entries split", KvFormat::kBf16, true, 2.0 * D},
          Variant{"bf16 kv, wgmma dims split", KvFormat::kBf16, true, 2.0 * D},
          Variant{"bf16 kv, wgmma, rows by tma", KvFormat::kBf16, true, 2.0 * D},
          Variant{"bf16 kv, mma.sync", KvFormat::kBf16, true, 2.0 * D},
          Variant{"bf16 kv, tensor cores, rows in L2", KvFormat::kBf16, true, 2.0 * D},
          Variant{"v4 fp8 kv, tensor cores", KvFormat::kV4Fp8, true, 584.0},
          Variant{"v4 fp8 kv, mma.sync", KvFormat::kV4Fp8, true, 584.0},
          Variant{"v4 fp8 kv, tensor cores, rows in L2", KvFormat::kV4Fp8, true, 584.0},
          Variant{"bf16 kv, simt fp32", KvFormat::kBf16, false, 2.0 * D}}) {
      if (!v.tc && m != 256) continue;  // the SIMT path only at one size (it is slow)
      if (v.tc && m == 256) continue;
      char name[96];
      std::snprintf(name, sizeof(name), "attn m=%lld %s", static_cast<long long>(m), v.tag);
      if (!Want(filter, name)) continue;
      const void* kv = v.f == KvFormat::kBf16 ? static_cast<const void*>(kv16.data())
                                              : static_cast<const void*>(kv8.data());
      p.kv_format = v.f;
      p.q_bf16 = v.tc;
      p.q = v.tc ? static_cast<const void*>(q16.data()) : static_cast<const void*>(q32.data());
      const bool in_l2 = std::string(v.tag).find("in L2") != std::string::npos;
      p.sets[0] = {kv, rows, in_l2 ? d0_l2.data() : d0.data(), nullptr, W};
      p.sets[1] = {kv, rows, in_l2 ? d1_l2.data() : d1.data(), nullptr, K};
      const std::string tag = v.tag;
      p.tc_kernel =
          tag.find("mma.sync") != std::string::npos        ? AttentionTcKernel::kMma
          : tag.find("rows by tma") != std::string::npos   ? AttentionTcKernel::kWgmmaTma
          : tag.find("dims split") != std::string::npos    ? AttentionTcKernel::kWgmmaDimsSplit
          : tag.find("entries split") != std::string::npos ? AttentionTcKernel::kWgmmaEntrySplit
                                                           : AttentionTcKernel::kAuto;
      report(name, TimeMs([&] { return LaunchSparseAttention(p, nullptr); }, 2, v.tc ? 10 : 3),
             flops, m * (W + K) * v.row_bytes + m * H * D * (4.0 + (v.tc ? 2.0 : 4.0)));
    }
  }
}

// ---- Sparse attention, tiny-v4's shape: 4 heads x 128, 128 window + 64 selected, fp32 KV
// --------- The SIMT kernel against the few-heads tensor-core kernel on the same bf16 values.
void PerfAttentionFewHeads(const Reporter& report, const std::string& filter) {
  const int H = 4, D = 128, W = 128, K = 64;
  const int64_t m = 32768, rows = 16384;
  std::vector<float> kv = RandomF32(static_cast<size_t>(rows * D), 30);
  std::vector<float> q = RandomF32(static_cast<size_t>(m * H * D), 31);
  for (float& v : kv) v = quant::RoundBf16(v);
  for (float& v : q) v = quant::RoundBf16(v);
  auto dkv = Upload(kv);
  auto dq = Upload(q);
  auto sink = Upload(RandomF32(static_cast<size_t>(H), 32));
  Fast g{33};
  std::vector<int32_t> i0(static_cast<size_t>(m * W)), i1(static_cast<size_t>(m * K));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t start = i % (rows - W);
    for (int j = 0; j < W; ++j)
      i0[static_cast<size_t>(i * W + j)] = static_cast<int32_t>(start + j);
    for (int j = 0; j < K; ++j)
      i1[static_cast<size_t>(i * K + j)] =
          static_cast<int32_t>(g.Next() % static_cast<uint64_t>(rows));
  }
  auto d0 = Upload(i0);
  auto d1 = Upload(i1);
  auto out = DeviceBuffer<float>::Allocate(static_cast<size_t>(m * H * D));
  SparseAttentionParams p;
  p.q = dq.data();
  p.sink = sink.data();
  p.out = out->data();
  p.m = m;
  p.n_heads = H;
  p.head_dim = D;
  p.scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.kv_format = KvFormat::kFp32;
  p.sets[0] = {dkv.data(), rows, d0.data(), nullptr, W};
  p.sets[1] = {dkv.data(), rows, d1.data(), nullptr, K};
  const double flops = 4.0 * m * H * (W + K) * D;
  const double bytes = m * (W + K) * D * 4.0 + m * H * D * 8.0;
  if (Want(filter, "attn tiny m=32768 4 heads, simt fp32")) {
    report("attn tiny m=32768 4 heads, simt fp32",
           TimeMs([&] { return LaunchSparseAttention(p, nullptr); }, 2, 10), flops, bytes);
  }
  // The same bf16 values stored as bf16 (what the engine's bf16 profiles read): the few-heads
  // tensor-core kernel, and SIMT over the same storage for comparison.
  std::vector<uint16_t> kv16(kv.size());
  for (size_t j = 0; j < kv.size(); ++j) kv16[j] = quant::FloatToBf16Bits(kv[j]);
  auto dkv16 = Upload(kv16);
  p.kv_format = KvFormat::kBf16;
  p.sets[0].kv = p.sets[1].kv = dkv16.data();
  const double bytes16 = m * (W + K) * D * 2.0 + m * H * D * 8.0;
  for (const bool tc : {false, true}) {
    const char* name = tc ? "attn tiny m=32768 4 heads, bf16 kv, few-heads tensor cores"
                          : "attn tiny m=32768 4 heads, bf16 kv, simt";
    if (!Want(filter, name)) continue;
    p.bf16_values = tc;
    report(name, TimeMs([&] { return LaunchSparseAttention(p, nullptr); }, 2, 10), flops, bytes16);
  }
}

// The tiny model's tensor-core linears at 32,768 rows (bf16 profile; x fp32 holding bf16 values,
// y fp32): bytes are x once, W once and y once, the floor a memory-bound product reaches.
void PerfLinearTiny(const Reporter& report, const std::string& filter) {
  struct Shape {
    const char* name;
    int64_t in, out;
    int w_pieces;
  };
  const Shape shapes[] = {
      {"256->128 (wkv, wq_a)", 256, 128, 1},
      {"128->512 (wq_b)", 128, 512, 1},
      {"256->256 (compressor)", 256, 256, 1},
      {"1024->24, W in 3 pieces (mHC)", 1024, 24, 3},
  };
  // Each shape at 8K and 32K rows through each tensor-core kernel that takes it (the W-resident
  // one, linear_mma_resident.cu, against the tiled one: the ratio is the resident kernel's gain).
  for (const int64_t m : {int64_t{8192}, int64_t{32768}}) {
    for (const Shape& sh : shapes) {
      const std::string base = "linear tiny m=" + std::to_string(m) + " " + sh.name;
      if (!Want(filter, base.c_str())) continue;
      std::vector<float> x = RandomF32(static_cast<size_t>(m * sh.in), 40);
      for (float& v : x) v = quant::RoundBf16(v);
      auto dx = Upload(x);
      auto dw = Upload(RandomBf16(static_cast<size_t>(sh.w_pieces * sh.out * sh.in), 41));
      auto y = DeviceBuffer<float>::Allocate(static_cast<size_t>(m * sh.out));
      LinearParams p;
      p.x = dx.data();
      p.w_bf16 = dw.data();
      p.w_pieces = sh.w_pieces;
      p.w_piece_stride = sh.out * sh.in;
      p.y = y->data();
      p.rows = m;
      p.in = sh.in;
      p.out = sh.out;
      p.round_bf16 = true;
      const double flops = 2.0 * m * sh.in * sh.out * sh.w_pieces;
      const double bytes = m * sh.in * 4.0 + sh.w_pieces * sh.out * sh.in * 2.0 + m * sh.out * 4.0;
      double tiled_ms = 0.0;
      for (const LinearMmaKernel k : {LinearMmaKernel::kTiled, LinearMmaKernel::kResident}) {
        p.mma_kernel = k;
        const bool resident = k == LinearMmaKernel::kResident;
        if (resident && !LaunchLinear(p, nullptr).ok()) {
          cudaGetLastError();
          std::printf("%s, W-resident: does not apply\n", base.c_str());
          continue;
        }
        const double ms = TimeMs([&] { return LaunchLinear(p, nullptr); }, 3, 20);
        report((base + (resident ? ", W-resident" : ", tiled")).c_str(), ms, flops, bytes);
        if (!resident) tiled_ms = ms;
        if (resident && ms > 0) std::printf("  W-resident vs tiled: %.2fx\n", tiled_ms / ms);
      }
    }
  }
}

}  // namespace

int RunPerf(const std::string& filter) {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("perf: %s, %d SMs, L2 %d MB; ceilings: %.0f TFLOP/s bf16 (KINDS.md), copy below\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, kPeakTflops);
  // As the engine runs (engine/cuda/cuda_backend.cc): memory that stream-ordered frees return
  // stays in the pool, so a launcher's scratch (the segmented top-k's candidates) is not mapped
  // again from the driver at every timed launch.
  if (const Status s = RetainPoolMemory(); !s.ok()) {
    std::fprintf(stderr, "perf: %s\n", s.ToString().c_str());
    return 1;
  }
  Reporter report;
  PerfCopy(report);
  if (Want(filter, "gemm")) PerfGemm(report);
  PerfIndexer(report, filter);
  PerfTopK(report, filter);
  PerfAttention(report, filter);
  PerfAttentionFewHeads(report, filter);
  PerfLinearTiny(report, filter);
  return 0;
}

}  // namespace nw::cuda::testing
