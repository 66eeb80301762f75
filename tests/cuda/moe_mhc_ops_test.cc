// MoE dispatch and combine, mHC pre and post against host references written here from the
// launchers' contracts (kernels/cuda/moe.h, kernels/cuda/mhc.h), on deterministic random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/mhc.h"
#include "kernels/cuda/moe.h"
#include "kernels/quant/scalar.h"
#include "tests/cuda/test_util.h"

namespace nw::cuda::testing {
namespace {

// ---- MoE dispatch ------------------------------------------------------------------------------

struct DispatchWant {
  std::vector<int32_t> offsets, list_token, position, tile_expert, tile_row0, tile_rows;
};

DispatchWant HostDispatch(const std::vector<int32_t>& experts, int64_t tokens, int k, int E,
                          int tile_rows_max, int64_t max_tiles) {
  DispatchWant w;
  const int64_t slots = tokens * k;
  w.offsets.assign(static_cast<size_t>(E) + 1, 0);
  for (int64_t s = 0; s < slots; ++s) ++w.offsets[static_cast<size_t>(experts[s]) + 1];
  for (int e = 0; e < E; ++e) w.offsets[e + 1] += w.offsets[e];
  w.list_token.assign(static_cast<size_t>(slots), -1);
  w.position.assign(static_cast<size_t>(slots), -1);
  std::vector<int32_t> at(w.offsets.begin(), w.offsets.end() - 1);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t pos = at[static_cast<size_t>(experts[s])]++;
    w.list_token[static_cast<size_t>(pos)] = static_cast<int32_t>(s / k);
    w.position[static_cast<size_t>(s)] = pos;
  }
  for (int e = 0; e < E; ++e) {
    for (int32_t r = w.offsets[e]; r < w.offsets[e + 1]; r += tile_rows_max) {
      w.tile_expert.push_back(e);
      w.tile_row0.push_back(r);
      w.tile_rows.push_back(std::min(tile_rows_max, w.offsets[e + 1] - r));
    }
  }
  while (static_cast<int64_t>(w.tile_expert.size()) < max_tiles) {
    w.tile_expert.push_back(-1);
    w.tile_row0.push_back(0);
    w.tile_rows.push_back(0);
  }
  return w;
}

TEST(CudaMoe, DispatchMatchesHostReference) {
  NW_REQUIRE_GPU();
  struct Case {
    int64_t tokens;
    int k, E;
    bool skewed;  // most slots on one expert, some experts empty
  };
  // Across the 1,024-slot chunks: single slot, a partial warp, many chunks, V4-Flash's 256
  // experts x 6, and a skewed routing that leaves experts empty.
  const Case cases[] = {{1, 1, 1, false},      {7, 2, 4, false},    {3000, 2, 4, false},
                        {2048, 6, 256, false}, {5000, 2, 16, true}, {40000, 2, 4, false}};
  Rng rng(0x5EED0D15);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.tokens << " tokens, k " << c.k << ", " << c.E << " experts");
    const int64_t slots = c.tokens * c.k;
    std::vector<int32_t> experts(static_cast<size_t>(slots));
    for (int64_t t = 0; t < c.tokens; ++t) {
      // k distinct experts per token, sorted (as routing leaves them).
      std::vector<int32_t> pick;
      while (static_cast<int>(pick.size()) < c.k) {
        int32_t e = static_cast<int32_t>(rng.Int(0, c.E - 1));
        if (c.skewed && rng.Int(0, 9) < 8) e = static_cast<int32_t>(pick.size());
        if (c.skewed && e % 3 == 2) e = static_cast<int32_t>(pick.size());
        if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
      }
      std::sort(pick.begin(), pick.end());
      std::copy(pick.begin(), pick.end(), experts.begin() + t * c.k);
    }
    const int tile_rows_max = 32;
    const int64_t max_tiles = slots / tile_rows_max + c.E + 1;
    const DispatchWant want = HostDispatch(experts, c.tokens, c.k, c.E, tile_rows_max, max_tiles);
    Guarded<int32_t> d_experts(experts), offsets(c.E + 1), list_token(slots), position(slots),
        tile_expert(max_tiles), tile_row0(max_tiles), tile_rows(max_tiles),
        scratch(MoeDispatchScratchInts(slots, c.E));
    MoeDispatchParams p;
    p.experts = d_experts.get();
    p.offsets = offsets.get();
    p.list_token = list_token.get();
    p.position = position.get();
    p.tile_expert = tile_expert.get();
    p.tile_row0 = tile_row0.get();
    p.tile_rows = tile_rows.get();
    p.chunk_counts = scratch.get();
    p.tokens = c.tokens;
    p.n_experts = c.E;
    p.k = c.k;
    p.tile_rows_max = tile_rows_max;
    p.max_tiles = max_tiles;
    NW_ASSERT_OK(LaunchMoeDispatch(p, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(SameInts(offsets.Download(), want.offsets));
    EXPECT_TRUE(SameInts(list_token.Download(), want.list_token));
    EXPECT_TRUE(SameInts(position.Download(), want.position));
    EXPECT_TRUE(SameInts(tile_expert.Download(), want.tile_expert));
    EXPECT_TRUE(SameInts(tile_row0.Download(), want.tile_row0));
    EXPECT_TRUE(SameInts(tile_rows.Download(), want.tile_rows));
    for (auto* g :
         {&offsets, &list_token, &position, &tile_expert, &tile_row0, &tile_rows, &scratch}) {
      EXPECT_TRUE(g->GuardsIntact());
    }
  }
}

TEST(CudaMoe, DispatchRejectsMissingScratch) {
  MoeDispatchParams p;
  int32_t dummy = 0;
  p.experts = p.offsets = p.list_token = p.position = &dummy;
  p.tile_expert = p.tile_row0 = p.tile_rows = &dummy;
  p.tokens = 4;
  p.n_experts = 4;
  p.k = 2;
  p.max_tiles = 4 * 2 / 32 + 4;
  EXPECT_FALSE(LaunchMoeDispatch(p, nullptr).ok());
}

// ---- mHC pre -----------------------------------------------------------------------------------

float HostExp(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
float HostSigmoid(float x) { return 1.0f / (1.0f + HostExp(-x)); }

// kernels/cuda/mhc.h's formulas, serially, for one token: coeffs (pre, post, comb) and u.
void HostMhcPre(const float* x, const float* raw, const std::vector<float>& base,
                const std::vector<float>& scale, int n, int dim, int iters, float eps,
                float norm_eps, float* co, float* u) {
  double ss = 0.0;
  for (int i = 0; i < n * dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float rs = 1.0f / std::sqrt(static_cast<float>(ss / (n * dim)) + norm_eps);
  for (int j = 0; j < n; ++j) {
    co[j] = HostSigmoid(raw[j] * rs * scale[0] + base[j]) + eps;
    co[n + j] = 2.0f * HostSigmoid(raw[n + j] * rs * scale[1] + base[n + j]);
  }
  float* c = co + 2 * n;
  for (int i = 0; i < n * n; ++i) c[i] = raw[2 * n + i] * rs * scale[2] + base[2 * n + i];
  for (int j = 0; j < n; ++j) {
    float* r = c + j * n;
    float mx = *std::max_element(r, r + n);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += (r[k] = HostExp(r[k] - mx));
    for (int k = 0; k < n; ++k) r[k] = r[k] / sum + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      for (int j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) sum += c[j * n + k];
        for (int k = 0; k < n; ++k) c[j * n + k] /= sum + eps;
      }
    }
    for (int k = 0; k < n; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += c[j * n + k];
      for (int j = 0; j < n; ++j) c[j * n + k] /= sum + eps;
    }
  }
  for (int d = 0; d < dim; ++d) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += co[i] * x[i * dim + d];
    u[d] = s;
  }
}

TEST(CudaMhc, PreMatchesHostReferenceOnTheWarpAndSerialPaths) {
  NW_REQUIRE_GPU();
  // n = 4 (tiny-v4, V4: the Sinkhorn across 16 lanes), n = 5 (25 lanes) and n = 8 (64 > 32:
  // serial on lane 0); each also one token a thread (kDeferSinkhornTokens tokens or more).
  for (int n : {4, 5, 8}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const int dim = 96, iters = 20;
    // Past the switch to one token a thread, and not a multiple of the 8 tokens a block takes.
    const int64_t tokens = kDeferSinkhornTokens + 77;
    const int mix_rows = (2 + n) * n, cw = 2 * n + n * n;
    Rng rng(0xC0FFEE + n);
    const std::vector<float> x = rng.Vec(static_cast<size_t>(tokens * n * dim), -2.0f, 2.0f);
    const std::vector<float> raw = rng.Vec(static_cast<size_t>(tokens * mix_rows), -3.0f, 3.0f);
    const std::vector<float> base = rng.Vec(static_cast<size_t>(mix_rows), -0.5f, 0.5f);
    const std::vector<float> scale = {0.7f, 1.3f, 2.1f};
    std::vector<float> want_co(static_cast<size_t>(tokens * cw)),
        want_u(static_cast<size_t>(tokens * dim));
    for (int64_t t = 0; t < tokens; ++t) {
      HostMhcPre(x.data() + t * n * dim, raw.data() + t * mix_rows, base, scale, n, dim, iters,
                 1e-6f, 1e-6f, want_co.data() + t * cw, want_u.data() + t * dim);
    }
    Guarded<float> dx(x), draw(raw), dbase(base), dscale(scale), du(tokens * dim), dco(tokens * cw);
    MhcPreParams p;
    p.x = dx.get();
    p.raw_mix = draw.get();
    p.base = dbase.get();
    p.scale = dscale.get();
    p.u = du.get();
    p.coeffs = dco.get();
    p.tokens = tokens;
    p.n = n;
    p.dim = dim;
    p.sinkhorn_iters = iters;
    NW_ASSERT_OK(LaunchMhcPre(p, nullptr));
    NW_ASSERT_SYNC();
    // Same formulas and orders; the mean square's double sum and exp's last double bit may
    // differ from the host's, a few fp32 ulps after 20 Sinkhorn rounds.
    EXPECT_TRUE(Near(dco.Download(), want_co, Tolerance{1e-7, 4e-6}));
    const std::vector<float> u = du.Download();
    EXPECT_TRUE(Near(u, want_u, Tolerance{1e-6, 4e-6}));
    EXPECT_TRUE(dco.GuardsIntact());
    EXPECT_TRUE(du.GuardsIntact());
    // These tokens take the Sinkhorn one token a thread in a second kernel; 100 tokens (below
    // kDeferSinkhornTokens) across each warp's lanes or on lane 0: the same bits.
    const std::vector<float> co_all = dco.Download();
    Guarded<float> du_few(100 * dim), dco_few(100 * cw);
    MhcPreParams few = p;
    few.tokens = 100;
    few.u = du_few.get();
    few.coeffs = dco_few.get();
    NW_ASSERT_OK(LaunchMhcPre(few, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(
        BitEqual(dco_few.Download(), std::vector<float>(co_all.begin(), co_all.begin() + 100 * cw)))
        << "in-warp vs one token a thread";
    EXPECT_TRUE(BitEqual(du_few.Download(), std::vector<float>(u.begin(), u.begin() + 100 * dim)));
    // round_bf16: u rounded as stored, the bits of a separate rounding pass.
    p.round_bf16 = true;
    NW_ASSERT_OK(LaunchMhcPre(p, nullptr));
    NW_ASSERT_SYNC();
    std::vector<float> rounded = u;
    for (float& v : rounded) v = quant::RoundBf16(v);
    EXPECT_TRUE(BitEqual(du.Download(), rounded));
  }
}

TEST(CudaMhc, PostMatchesHostReferenceBitForBit) {
  NW_REQUIRE_GPU();
  // dim 96: four values a thread (vector loads); 30: one value a thread.
  for (const auto& [n, dim] :
       std::vector<std::pair<int, int>>{{1, 96}, {4, 96}, {8, 96}, {4, 30}}) {
    SCOPED_TRACE(::testing::Message() << "n " << n << " dim " << dim);
    const int64_t tokens = 301;
    const int cw = 2 * n + n * n;
    Rng rng(0xB0057 + n);
    const std::vector<float> x = rng.Vec(static_cast<size_t>(tokens * n * dim), -2.0f, 2.0f);
    const std::vector<float> y = rng.Vec(static_cast<size_t>(tokens * dim), -3.0f, 3.0f);
    const std::vector<float> co = rng.Vec(static_cast<size_t>(tokens * cw), 0.0f, 1.0f);
    // X'_j = post_j * y + sum_i comb[i][j] * X_i, products and sums rounded one by one in order.
    std::vector<float> want(x.size());
    for (int64_t t = 0; t < tokens; ++t) {
      const float* c = co.data() + t * cw;
      for (int j = 0; j < n; ++j) {
        for (int d = 0; d < dim; ++d) {
          float residual = 0.0f;
          for (int i = 0; i < n; ++i) {
            const float prod = c[2 * n + i * n + j] * x[static_cast<size_t>((t * n + i) * dim + d)];
            residual = residual + prod;
          }
          const float lead = c[n + j] * y[static_cast<size_t>(t * dim + d)];
          want[static_cast<size_t>((t * n + j) * dim + d)] = lead + residual;
        }
      }
    }
    Guarded<float> dx(x), dy(y), dco(co), dout(x.size());
    MhcPostParams p;
    p.x = dx.get();
    p.y = dy.get();
    p.coeffs = dco.get();
    p.x_out = dout.get();
    p.tokens = tokens;
    p.n = n;
    p.dim = dim;
    NW_ASSERT_OK(LaunchMhcPost(p, nullptr));
    NW_ASSERT_SYNC();
    EXPECT_TRUE(BitEqual(dout.Download(), want));
    EXPECT_TRUE(dout.GuardsIntact());
    p.round_bf16 = true;
    NW_ASSERT_OK(LaunchMhcPost(p, nullptr));
    NW_ASSERT_SYNC();
    for (float& v : want) v = quant::RoundBf16(v);
    EXPECT_TRUE(BitEqual(dout.Download(), want));
  }
}

TEST(CudaMoe, CombineSumsExpertRowsInOrderThenShared) {
  NW_REQUIRE_GPU();
  const int64_t tokens = 333, dim = 72;
  const int k = 3;
  Rng rng(0xC0B1);
  const std::vector<float> expert_out = rng.Vec(static_cast<size_t>(tokens * k * dim), -4.0f, 4.0f);
  const std::vector<float> shared = rng.Vec(static_cast<size_t>(tokens * dim), -4.0f, 4.0f);
  std::vector<int32_t> position(static_cast<size_t>(tokens * k));
  for (int64_t s = 0; s < tokens * k; ++s) {  // a permutation of the list rows
    position[static_cast<size_t>(s)] = static_cast<int32_t>((s * 7 + 3) % (tokens * k));
  }
  std::vector<float> want(shared.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        acc = acc + expert_out[static_cast<size_t>(position[t * k + j] * dim + d)];
      }
      want[static_cast<size_t>(t * dim + d)] = acc + shared[static_cast<size_t>(t * dim + d)];
    }
  }
  Guarded<float> de(expert_out), dsh(shared), dout(shared.size());
  Guarded<int32_t> dpos(position);
  MoeCombineParams p;
  p.expert_out = de.get();
  p.position = dpos.get();
  p.shared = dsh.get();
  p.out = dout.get();
  p.tokens = tokens;
  p.k = k;
  p.dim = dim;
  NW_ASSERT_OK(LaunchMoeCombine(p, nullptr));
  NW_ASSERT_SYNC();
  EXPECT_TRUE(BitEqual(dout.Download(), want));
  p.round_bf16 = true;
  NW_ASSERT_OK(LaunchMoeCombine(p, nullptr));
  NW_ASSERT_SYNC();
  for (float& v : want) v = quant::RoundBf16(v);
  EXPECT_TRUE(BitEqual(dout.Download(), want));
  EXPECT_TRUE(dout.GuardsIntact());
}

}  // namespace
}  // namespace nw::cuda::testing
