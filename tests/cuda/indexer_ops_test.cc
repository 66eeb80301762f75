// Indexer logits against cpu::IndexerScores: the fp32 path bit for bit, the bf16 and fp8
// tensor-core paths within an fp32-summation bound, over contiguous ranges (ragged prefill) and
// paged keys (block tables), with empty and tile-edge lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/indexer.h"
#include "kernels/quant/quant.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

enum class Mode { kFp32, kBf16, kFp8, kNvfp4Scaled };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kFp32:
      return "fp32";
    case Mode::kBf16:
      return "bf16";
    case Mode::kFp8:
      return "fp8";
    case Mode::kNvfp4Scaled:
      return "nvfp4 (bf16 + per-key scale)";
  }
  return "?";
}

struct IndexerCase {
  Mode mode;
  bool paged;
  int n_heads;
  int head_dim;
  std::vector<int64_t> lens;  // visible keys per query
  // Every query reads a prefix of the same keys (ks = 0 / one block-table row), as a sequence's
  // prefill queries do; otherwise each query has its own keys.
  bool shared_keys = false;
  int page = 64;            // rows per page of paged keys
  int tiles_per_block = 0;  // IndexerLogitsParams::decode_tiles_per_block
  int stages = 0;           // IndexerLogitsParams::decode_stages
  IndexerPrefillKernel prefill = IndexerPrefillKernel::kAuto;
  int key_splits = 0;  // IndexerLogitsParams::prefill_key_splits
  IndexerDecodeKernel decode = IndexerDecodeKernel::kAuto;
  float q_head0_scale = 1.0f;  // head 0 of every query times this (before quantization)
};

/// Everything one case needs on the host: fake-quantized q/k (what the CPU sees) and the device
/// encodings of the same values.
struct IndexerData {
  std::vector<float> q, w, keys;  // keys: [key_rows, dim] fp32 values the CPU reads (by row)
  std::vector<uint16_t> q_bf16, k_bf16;
  std::vector<uint8_t> k_fp8;
  std::vector<float> k_scale;
};

uint16_t Bits16(float x) { return quant::FloatToBf16Bits(x); }

/// Runs one case against the CPU and returns the device's logits.
std::vector<float> RunIndexer(const IndexerCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << ModeName(c.mode) << (c.paged ? " paged" : " contiguous") << " heads " << c.n_heads
               << " dim " << c.head_dim << " page " << c.page << " tiles/block "
               << c.tiles_per_block << " prefill kernel "
               << (c.prefill == IndexerPrefillKernel::kMma ? "mma" : "auto") << " key splits "
               << c.key_splits << " seed " << seed);
  Rng rng(seed);
  const int64_t m = static_cast<int64_t>(c.lens.size());
  const int H = c.n_heads, D = c.head_dim;
  const int page = c.page;
  const int64_t max_len = *std::max_element(c.lens.begin(), c.lens.end());
  const int64_t out_cols = max_len + 3;

  // Key layout: contiguous = every query's keys back to back (a ragged prefill buffer); paged =
  // pages of 64 rows in a shuffled pool, one block-table row per query.
  std::vector<int32_t> ks(static_cast<size_t>(m)), ke(ks.size()), qrow(ks.size()),
      lengths(ks.size());
  int64_t key_rows = 0;
  const int64_t max_pages = (max_len + page - 1) / page + 1;
  std::vector<int32_t> table;
  if (!c.paged && c.shared_keys) {
    key_rows = max_len;
    for (int64_t i = 0; i < m; ++i) {
      ks[static_cast<size_t>(i)] = 0;
      ke[static_cast<size_t>(i)] = static_cast<int32_t>(c.lens[static_cast<size_t>(i)]);
    }
  } else if (!c.paged) {
    for (int64_t i = 0; i < m; ++i) {
      ks[static_cast<size_t>(i)] = static_cast<int32_t>(key_rows);
      key_rows += c.lens[static_cast<size_t>(i)];
      ke[static_cast<size_t>(i)] = static_cast<int32_t>(key_rows);
    }
  } else if (c.shared_keys) {
    const int64_t pages = (max_len + page - 1) / page;
    key_rows = (pages + 1) * page;
    table.assign(static_cast<size_t>(m * max_pages), -1);
    for (int64_t pg = 0; pg < pages; ++pg) {
      table[static_cast<size_t>(pg)] = static_cast<int32_t>(pages - pg);  // reversed, page 0 free
    }
    for (int64_t i = 0; i < m; ++i) {
      qrow[static_cast<size_t>(i)] = 0;
      lengths[static_cast<size_t>(i)] = static_cast<int32_t>(c.lens[static_cast<size_t>(i)]);
    }
  } else {
    int64_t pages = 0;
    for (int64_t len : c.lens) pages += (len + page - 1) / page;
    key_rows = (pages + 2) * page;  // two spare pages
    std::vector<int32_t> perm(static_cast<size_t>(pages + 2));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i)
      std::swap(perm[i - 1], perm[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(i) - 1))]);
    table.assign(static_cast<size_t>(m * max_pages), -1);
    size_t next = 0;
    for (int64_t i = 0; i < m; ++i) {
      qrow[static_cast<size_t>(i)] = static_cast<int32_t>(m - 1 - i);  // rows in reverse order
      lengths[static_cast<size_t>(i)] = static_cast<int32_t>(c.lens[static_cast<size_t>(i)]);
      for (int64_t pg = 0; pg * page < c.lens[static_cast<size_t>(i)]; ++pg) {
        table[static_cast<size_t>((m - 1 - i) * max_pages + pg)] = perm[next++];
      }
    }
  }

  IndexerData d;
  d.q = rng.Vec(static_cast<size_t>(m * H * D), -1.0f, 1.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int e = 0; e < D; ++e) d.q[static_cast<size_t>(i * H * D + e)] *= c.q_head0_scale;
  }
  d.w = rng.Vec(static_cast<size_t>(m * H), -0.2f, 0.2f);
  d.keys = rng.Vec(static_cast<size_t>(key_rows * D), -1.0f, 1.0f);
  // Fake-quantize what the CPU sees, and encode the same values for the device.
  if (c.mode != Mode::kFp32) {
    if (c.mode == Mode::kFp8) {
      for (int64_t r = 0; r < m * H; ++r) quant::FakeQuantFp8(&d.q[r * D], &d.q[r * D], D, 128);
    }
    quant::FakeQuantBf16(d.q.data(), d.q.data(), d.q.size());  // no-op after fp8
    for (float v : d.q) d.q_bf16.push_back(Bits16(v));
    d.k_scale.assign(static_cast<size_t>(key_rows), 1.0f);
    for (int64_t r = 0; r < key_rows; ++r) {
      float* k = &d.keys[r * D];
      if (c.mode == Mode::kBf16) {
        quant::FakeQuantBf16(k, k, D);
        for (int i = 0; i < D; ++i) d.k_bf16.push_back(Bits16(k[i]));
      } else if (c.mode == Mode::kFp8) {
        float amax = 0.0f;
        for (int i = 0; i < D; ++i) amax = std::max(amax, std::fabs(k[i]));
        const float s = quant::DecodeUe8m0(quant::Ue8m0ScaleFor(amax, quant::kE4M3Max));
        d.k_scale[static_cast<size_t>(r)] = s;
        for (int i = 0; i < D; ++i) {
          const uint8_t code = quant::EncodeE4M3(k[i] / s);
          d.k_fp8.push_back(code);
          k[i] = quant::DecodeE4M3(code) * s;  // = FakeQuantFp8(k, 128) with one block
        }
      } else {  // NVFP4: bf16 carries e2m1 * block scale, k_scale the row's global scale
        std::vector<float> fq(static_cast<size_t>(D));
        quant::FakeQuantNvfp4(k, fq.data(), D);
        float amax = 0.0f;
        for (int i = 0; i < D; ++i) amax = std::max(amax, std::fabs(k[i]));
        const float g = amax / (quant::kE4M3Max * quant::kE2M1Max);
        d.k_scale[static_cast<size_t>(r)] = g;
        for (int i = 0; i < D; ++i) {
          const float sb = quant::DecodeE4M3(quant::EncodeE4M3([&] {
            float a = 0;
            for (int j = i / 16 * 16; j < std::min(D, i / 16 * 16 + 16); ++j)
              a = std::max(a, std::fabs(k[j]));
            return a;
          }() / (quant::kE2M1Max * g)));
          const float code_val =
              sb == 0.0f ? 0.0f : quant::DecodeE2M1(quant::EncodeE2M1(k[i] / (sb * g)));
          d.k_bf16.push_back(Bits16(code_val * sb));
        }
        std::copy(fq.begin(), fq.end(), k);
      }
    }
  }

  // CPU reference (and, for the tensor-core paths, a bound from the magnitudes of the terms).
  std::vector<float> want(static_cast<size_t>(m * out_cols), -INFINITY);
  std::vector<double> bound(want.size(), 0.0);
  const cpu::IndexerParams ip{H, D};
  std::vector<float> keys_of(static_cast<size_t>(max_len * D)),
      row_scores(static_cast<size_t>(max_len));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t len = c.lens[static_cast<size_t>(i)];
    for (int64_t j = 0; j < len; ++j) {
      int64_t row;
      if (!c.paged) {
        row = ks[static_cast<size_t>(i)] + j;
      } else {
        row = static_cast<int64_t>(
                  table[static_cast<size_t>(qrow[static_cast<size_t>(i)] * max_pages + j / page)]) *
                  page +
              j % page;
      }
      std::copy_n(&d.keys[row * D], D, &keys_of[j * D]);
    }
    cpu::IndexerScores(ip, &d.q[i * H * D], &d.w[i * H], keys_of.data(), len, row_scores.data());
    for (int64_t j = 0; j < len; ++j) {
      want[static_cast<size_t>(i * out_cols + j)] = row_scores[static_cast<size_t>(j)];
      double mag = 0.0;
      for (int h = 0; h < H; ++h) {
        double dot = 0.0;
        for (int e = 0; e < D; ++e)
          dot += std::fabs(static_cast<double>(d.q[(i * H + h) * D + e]) * keys_of[j * D + e]);
        mag += std::fabs(static_cast<double>(d.w[i * H + h])) * dot;
      }
      bound[static_cast<size_t>(i * out_cols + j)] = 1e-4 * mag + 1e-30;
    }
  }

  Guarded<float> dq(c.mode == Mode::kFp32 ? d.q : std::vector<float>{});
  Guarded<uint16_t> dq16(d.q_bf16), dk16(d.k_bf16);
  Guarded<float> dw(d.w), dk32(c.mode == Mode::kFp32 ? d.keys : std::vector<float>{}),
      dscale(d.k_scale);
  Guarded<uint8_t> dk8(d.k_fp8);
  Guarded<int32_t> dks(ks), dke(ke), dtable(table), dqrow(qrow), dlen(lengths);
  Guarded<float> dout(static_cast<size_t>(m * out_cols));
  IndexerLogitsParams p;
  p.m = m;
  p.n_heads = H;
  p.head_dim = D;
  p.w = dw.get();
  p.key_rows = key_rows;
  switch (c.mode) {
    case Mode::kFp32:
      p.q = dq.get();
      p.k = dk32.get();
      p.k_format = IndexerKeyFormat::kFp32;
      break;
    case Mode::kBf16:
      p.q = dq16.get();
      p.k = dk16.get();
      p.k_format = IndexerKeyFormat::kBf16;
      break;
    case Mode::kFp8:
      p.q = dq16.get();
      p.k = dk8.get();
      p.k_scale = dscale.get();
      p.k_format = IndexerKeyFormat::kFp8;
      break;
    case Mode::kNvfp4Scaled:
      p.q = dq16.get();
      p.k = dk16.get();
      p.k_scale = dscale.get();
      p.k_format = IndexerKeyFormat::kBf16;
      break;
  }
  if (c.paged) {
    p.block_table = dtable.get();
    p.block_table_stride = max_pages;
    p.query_row = dqrow.get();
    p.lengths = dlen.get();
    p.page_size = page;
  } else {
    p.ks = dks.get();
    p.ke = dke.get();
  }
  p.out = dout.get();
  p.out_cols = out_cols;
  p.max_len = max_len;
  p.decode_tiles_per_block = c.tiles_per_block;
  p.decode_stages = c.stages;
  p.prefill_kernel = c.prefill;
  p.prefill_key_splits = c.key_splits;
  p.decode_kernel = c.decode;
  EXPECT_TRUE(LaunchIndexerLogits(p, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = dout.Download();
  if (c.mode == Mode::kFp32) {
    EXPECT_TRUE(BitEqual(got, want)) << "fp32 logits must be the CPU's bits";
  } else {
    EXPECT_TRUE(Near(got, std::vector<double>(want.begin(), want.end()), {}, &bound));
  }
  EXPECT_TRUE(dout.GuardsIntact());
  EXPECT_TRUE(LaunchIndexerLogits(p, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(BitEqual(dout.Download(), got)) << "run to run";
  return got;
}

const std::vector<int64_t> kEdgeLens = {0, 1, 63, 64, 65, 127, 128, 129, 7, 300};

TEST(CudaIndexer, Fp32ExactContiguousAndPaged) {
  NW_REQUIRE_GPU();
  uint64_t seed = 1;
  for (bool paged : {false, true}) {
    RunIndexer({Mode::kFp32, paged, 64, 128, kEdgeLens}, seed++);
    RunIndexer({Mode::kFp32, paged, 8, 64, {1, 0, 97, 64, 200}}, seed++);
    RunIndexer({Mode::kFp32, paged, 7, 128, {31, 1025}}, seed++);
    // A causal prefill's queries over one key prefix: 8-query groups (kDim 64, 8 heads), the
    // last group partial, lengths growing by one every four queries.
    std::vector<int64_t> causal;
    for (int64_t t = 0; t < 203; ++t) causal.push_back((t + 1) / 4 + 60);
    RunIndexer({Mode::kFp32, paged, 8, 64, causal, true}, seed++);
    RunIndexer({Mode::kFp32, paged, 16, 128, {5, 300, 7, 129, 64}, true}, seed++);
  }
}

TEST(CudaIndexer, Bf16TensorCores) {
  NW_REQUIRE_GPU();
  uint64_t seed = 20;
  for (bool paged : {false, true}) {
    RunIndexer({Mode::kBf16, paged, 64, 128, kEdgeLens}, seed++);
    RunIndexer({Mode::kBf16, paged, 8, 64, {1, 0, 97, 64, 200}}, seed++);
    RunIndexer({Mode::kBf16, paged, 17, 128, {31, 1025, 2}}, seed++);
  }
}

// Contiguous keys and at least 16 queries take the grouped kernels: wgmma (bf16 keys, scaled NVFP4
// rows) and the mma.sync kernel (forced, and for fp8 keys), 2 x 256 / HP and 128 / HP queries a
// block for HP = 8, 16, 32 and 64 padded heads, the last block partial, shared key prefixes and
// per-query key ranges.
TEST(CudaIndexer, GroupedTensorCoresContiguous) {
  NW_REQUIRE_GPU();
  uint64_t seed = 60;
  std::vector<int64_t> causal;
  for (int64_t t = 0; t < 203; ++t) causal.push_back((t + 1) / 4 + 60);
  std::vector<int64_t> ragged;
  for (int64_t t = 0; t < 37; ++t) ragged.push_back((t * 37) % 150);
  for (Mode mode : {Mode::kBf16, Mode::kFp8, Mode::kNvfp4Scaled}) {
    for (IndexerPrefillKernel k : {IndexerPrefillKernel::kAuto, IndexerPrefillKernel::kMma}) {
      if (mode == Mode::kFp8 && k == IndexerPrefillKernel::kMma) continue;  // the same kernel
      IndexerCase c{mode, false, 8, 64, causal, true};
      c.prefill = k;
      RunIndexer(c, seed++);
      for (const IndexerCase& x : {IndexerCase{mode, false, 4, 64, causal, true},
                                   IndexerCase{mode, false, 8, 64, ragged, false},
                                   IndexerCase{mode, false, 16, 128, ragged, true},
                                   IndexerCase{mode, false, 20, 64, causal, true},
                                   IndexerCase{mode, false, 64, 128, ragged, false},
                                   IndexerCase{mode, false, 48, 128, causal, true}}) {
        c = x;
        c.prefill = k;
        RunIndexer(c, seed++);
      }
    }
  }
}

// The wgmma kernel over many key tiles: its 4-stage ring wraps many times with one key split,
// tiles spread over blocks otherwise; lengths ending mid-tile; queries with their own key ranges
// (a block's tiles are the union, those no query reads skipped). The logits are the same bits
// however the tiles are split.
TEST(CudaIndexer, WgmmaPrefillOverManyTiles) {
  NW_REQUIRE_GPU();
  uint64_t seed = 100;
  std::vector<int64_t> causal;  // 100 queries of one request, keys growing by one every 4
  for (int64_t t = 0; t < 100; ++t) causal.push_back((t + 1) / 4 + 600);
  std::vector<int64_t> own;  // 41 queries, each over its own keys
  for (int64_t t = 0; t < 41; ++t) own.push_back(t % 5 == 0 ? 0 : 100 + 37 * t);
  for (Mode mode : {Mode::kBf16, Mode::kNvfp4Scaled}) {
    for (const IndexerCase& base : {IndexerCase{mode, false, 64, 128, causal, true},
                                    IndexerCase{mode, false, 8, 64, causal, true},
                                    IndexerCase{mode, false, 32, 128, own, false}}) {
      const uint64_t s = seed++;
      std::vector<float> first;
      for (int splits : {1, 3, 0}) {
        IndexerCase c = base;
        c.key_splits = splits;
        const std::vector<float> got = RunIndexer(c, s);
        if (first.empty()) {
          first = got;
        } else {
          EXPECT_TRUE(BitEqual(got, first)) << "key splits " << splits << " against 1";
        }
      }
    }
  }
}

TEST(CudaIndexer, Fp8AndNvfp4KeysTensorCores) {
  NW_REQUIRE_GPU();
  uint64_t seed = 40;
  for (bool paged : {false, true}) {
    RunIndexer({Mode::kFp8, paged, 64, 128, kEdgeLens}, seed++);
    RunIndexer({Mode::kFp8, paged, 8, 64, {1, 0, 97, 64, 200}}, seed++);
    RunIndexer({Mode::kNvfp4Scaled, paged, 64, 128, {65, 1, 0, 513}}, seed++);
  }
}

// The decode kernel (one query per block, paged keys) streams each block's tiles through a
// cp.async pipeline: many tiles per block (forced), page sizes that do not divide its 64-key tiles,
// lengths ending mid-tile; the logits are the same bits however the tiles are spread over blocks.
// Both decode kernels (wgmma and mma.sync, forced) on every key format.
TEST(CudaIndexer, DecodePipelineOverManyTiles) {
  NW_REQUIRE_GPU();
  const std::vector<int64_t> lens = {2000, 1, 700, 4097, 64, 0, 1300};
  for (IndexerDecodeKernel kernel : {IndexerDecodeKernel::kWgmma, IndexerDecodeKernel::kMma}) {
    SCOPED_TRACE(kernel == IndexerDecodeKernel::kWgmma ? "wgmma" : "mma.sync");
    uint64_t seed = 80;
    for (Mode mode : {Mode::kBf16, Mode::kFp8, Mode::kNvfp4Scaled}) {
      for (int page : {16, 100, 256}) {
        const uint64_t s = seed++;
        std::vector<float> first;
        for (int stages : {3, 2, 4}) {
          for (int per : {1, 3, 16}) {
            const std::vector<float> got =
                RunIndexer({mode, true, 64, 128, lens, false, page, per, stages, {}, 0, kernel}, s);
            if (first.empty()) {
              first = got;
            } else {
              EXPECT_TRUE(BitEqual(got, first))
                  << "tiles per block " << per << ", " << stages << " stages against 1, 3";
            }
          }
        }
      }
      RunIndexer({mode, true, 8, 64, lens, false, 64, 5, 0, {}, 0, kernel}, seed++);
      RunIndexer({mode, false, 17, 128, {3000, 5, 129}, false, 64, 7, 0, {}, 0, kernel}, seed++);
      // Every padded head count of the wgmma kernel (16, 32, 64) at both head dims.
      RunIndexer({mode, true, 16, 128, {300, 65}, false, 64, 0, 0, {}, 0, kernel}, seed++);
      RunIndexer({mode, true, 32, 64, {300, 65}, false, 32, 0, 0, {}, 0, kernel}, seed++);
      RunIndexer({mode, true, 33, 64, {129, 2}, false, 64, 0, 0, {}, 0, kernel}, seed++);
    }
  }
}

// Paged keys whose page lies outside the key buffer give NaN logits (a table entry of -1, a page
// past key_rows, a page only partly inside it), and the other keys' logits are the bits of the
// same launch with every page present. Both decode kernels, fp8 and bf16 keys, pages of 64 keys
// (whole tiles a page: the wgmma kernel reads a tile's first row once, up front) and of 16, and
// 66 tiles a block (more than the wgmma kernel looks up up front: rows a tile ahead instead).
TEST(CudaIndexer, DecodePagesOutsideTheKeyBufferGiveNan) {
  NW_REQUIRE_GPU();
  const int H = 64, D = 128;
  const int64_t len = 4200;
  for (IndexerDecodeKernel kernel : {IndexerDecodeKernel::kWgmma, IndexerDecodeKernel::kMma}) {
    for (bool fp8 : {true, false}) {
      for (int page : {64, 16}) {
        std::vector<float> first;  // the all-pages logits of the first tiles-a-block setting
        for (int per : {0, 66}) {
          SCOPED_TRACE(::testing::Message()
                       << (kernel == IndexerDecodeKernel::kWgmma ? "wgmma" : "mma.sync")
                       << (fp8 ? " fp8" : " bf16") << " page " << page << " tiles/block " << per);
          Rng rng(300 + page);
          const int64_t pages = (len + page - 1) / page, stride = pages + 1;
          const int64_t pool = 2 * pages + 4;         // physical pages in the buffer
          const int64_t key_rows = pool * page - 10;  // the last pool page partly outside
          std::vector<int32_t> perm(static_cast<size_t>(pool - 1));  // never the last page
          std::iota(perm.begin(), perm.end(), 0);
          for (size_t k = perm.size(); k > 1; --k)
            std::swap(perm[k - 1],
                      perm[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(k) - 1))]);
          std::vector<int32_t> full(static_cast<size_t>(2 * stride), -1);
          for (int64_t pg = 0; pg < 2 * pages; ++pg) {
            full[static_cast<size_t>((pg / pages) * stride + pg % pages)] =
                perm[static_cast<size_t>(pg)];
          }
          std::vector<int32_t> holed = full;
          const int64_t gone = 3, partial = 10, past = 20;  // pages of query 0, 1, 1
          holed[static_cast<size_t>(gone)] = -1;
          holed[static_cast<size_t>(stride + partial)] = static_cast<int32_t>(pool - 1);
          holed[static_cast<size_t>(stride + past)] = static_cast<int32_t>(pool + 5);

          Guarded<uint16_t> dq([&] {
            std::vector<uint16_t> v(static_cast<size_t>(2 * H * D));
            for (auto& x : v) x = quant::FloatToBf16Bits(rng.Uniform(-1.0f, 1.0f));
            return v;
          }());
          Guarded<float> dw(rng.Vec(static_cast<size_t>(2 * H), -0.2f, 0.2f));
          Guarded<float> dscale(rng.Vec(static_cast<size_t>(pool * page), 0.01f, 0.02f));
          std::vector<uint8_t> kbytes(static_cast<size_t>(pool * page * D * (fp8 ? 1 : 2)));
          for (size_t k = 0; k < kbytes.size(); ++k) {
            // e4m3 without NaN codes; bf16 pairs whose high byte keeps them finite and small.
            const uint8_t b = static_cast<uint8_t>(rng.Next() >> 56);
            kbytes[k] = fp8 ? (b & 0xBE) : ((k & 1) ? (b & 0xBD) : b);
          }
          Guarded<uint8_t> dk(kbytes);
          Guarded<int32_t> dqrow(std::vector<int32_t>{0, 1});
          Guarded<int32_t> dlen(
              std::vector<int32_t>{static_cast<int32_t>(len), static_cast<int32_t>(len)});
          auto run = [&](const std::vector<int32_t>& table) {
            Guarded<int32_t> dtable(table);
            Guarded<float> dout(static_cast<size_t>(2 * len));
            IndexerLogitsParams p;
            p.m = 2;
            p.n_heads = H;
            p.head_dim = D;
            p.q = dq.get();
            p.w = dw.get();
            p.k = dk.get();
            p.k_scale = fp8 ? dscale.get() : nullptr;
            p.k_format = fp8 ? IndexerKeyFormat::kFp8 : IndexerKeyFormat::kBf16;
            p.key_rows = key_rows;
            p.block_table = dtable.get();
            p.block_table_stride = stride;
            p.query_row = dqrow.get();
            p.lengths = dlen.get();
            p.page_size = page;
            p.out = dout.get();
            p.out_cols = len;
            p.max_len = len;
            p.decode_tiles_per_block = per;
            p.decode_kernel = kernel;
            EXPECT_TRUE(LaunchIndexerLogits(p, nullptr).ok());
            EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            EXPECT_TRUE(dout.GuardsIntact());
            return dout.Download();
          };
          const std::vector<float> want = run(full), got = run(holed);
          if (first.empty()) {
            first = want;
          } else {
            EXPECT_TRUE(BitEqual(want, first)) << "66 tiles a block against the default";
          }
          int64_t nan_expected = 0, nan_wrong = 0, bits_wrong = 0, finite_wrong = 0;
          for (int64_t q = 0; q < 2; ++q) {
            for (int64_t j = 0; j < len; ++j) {
              const float g = got[static_cast<size_t>(q * len + j)];
              const int64_t pg = j / page;
              const bool out_page = (q == 0 && pg == gone) || (q == 1 && pg == past);
              const bool partial_page = q == 1 && pg == partial;
              const bool out_row = partial_page && (pool - 1) * page + j % page >= key_rows;
              if (out_page || out_row) {
                ++nan_expected;
                nan_wrong += std::isnan(g) ? 0 : 1;
              } else if (partial_page) {
                finite_wrong += std::isfinite(g) ? 0 : 1;  // another page's keys: other bits
              } else {
                const float w = want[static_cast<size_t>(q * len + j)];
                bits_wrong += std::memcmp(&g, &w, sizeof(float)) == 0 && std::isfinite(w) ? 0 : 1;
              }
            }
          }
          EXPECT_EQ(nan_expected, 2 * page + 10);
          EXPECT_EQ(nan_wrong, 0) << "keys outside the buffer must give NaN";
          EXPECT_EQ(finite_wrong, 0);
          EXPECT_EQ(bits_wrong, 0) << "keys inside the buffer: the all-pages launch's bits";
        }
      }
    }
  }
}

// The wgmma decode kernel multiplies e4m3 keys in f16 when the query, scaled by a power of two,
// is exactly f16, else in bf16. One head 2^30 times the others' magnitude (each head its own fp8
// scale) leaves the small heads' values below f16's range: the bf16 fallback, still within the
// bound of the CPU's logits; the ordinary queries of the other tests take f16.
TEST(CudaIndexer, WgmmaDecodeQueryBeyondF16TakesBf16) {
  NW_REQUIRE_GPU();
  uint64_t seed = 120;
  for (bool paged : {true, false}) {
    IndexerCase c{Mode::kFp8, paged, 64, 128, {700, 1, 129}};
    c.decode = IndexerDecodeKernel::kWgmma;
    c.q_head0_scale = 1073741824.0f;  // 2^30
    RunIndexer(c, seed++);
    c.n_heads = 8;
    c.head_dim = 64;
    RunIndexer(c, seed++);
  }
}

TEST(CudaIndexer, RejectsBadParams) {
  IndexerLogitsParams p;
  p.m = 1;
  p.n_heads = 64;
  p.head_dim = 96;
  p.out_cols = 1;
  EXPECT_EQ(LaunchIndexerLogits(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.head_dim = 128;
  p.n_heads = 65;
  EXPECT_EQ(LaunchIndexerLogits(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.n_heads = 64;
  p.decode_tiles_per_block = -1;
  EXPECT_EQ(LaunchIndexerLogits(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.decode_tiles_per_block = 0;
  p.decode_stages = 5;
  EXPECT_EQ(LaunchIndexerLogits(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.decode_stages = 0;
  p.prefill_key_splits = -1;
  EXPECT_EQ(LaunchIndexerLogits(p, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::cuda::testing
