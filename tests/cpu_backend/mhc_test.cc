// mHC (engine/cpu/mhc.h) against plain double-precision formulations written here from the
// reference (Block.hc_pre / hc_post, ParallelHead.hc_head, kernel.hc_split_sinkhorn), plus hand
// computations of the Sinkhorn iteration semantics.
#include "engine/cpu/mhc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/splitmix64.h"

namespace nw::cpu {
namespace {

// SplitMix64: a fixed, platform-independent stream, so every failure replays.
class Rng {
 public:
  explicit Rng(uint64_t seed) : stream_(seed) {}
  uint64_t Next() { return stream_.Next(); }
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) {
    const double u = static_cast<double>(Next() >> 11) * 0x1.0p-53;
    return static_cast<float>(lo + (hi - lo) * u);
  }

 private:
  SplitMix64 stream_;
};

Tensor RandomTensor(std::vector<int64_t> shape, Rng& rng, float lo, float hi) {
  Tensor t(std::move(shape));
  for (float& v : t.data) v = rng.Uniform(lo, hi);
  return t;
}

std::vector<float> RandomVector(int64_t n, Rng& rng, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = rng.Uniform(lo, hi);
  return v;
}

double Sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// ---- Double-precision reference -------------------------------------------------------------

// (fn · vec(X)) / sqrt(mean(vec(X)^2) + norm_eps), rows outputs.
std::vector<double> RefMix(const Tensor& fn, int64_t rows, const float* x, int64_t nd,
                           double norm_eps) {
  double sum_sq = 0;
  for (int64_t i = 0; i < nd; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(nd) + norm_eps);
  std::vector<double> mix(static_cast<size_t>(rows));
  for (int64_t o = 0; o < rows; ++o) {
    double s = 0;
    for (int64_t i = 0; i < nd; ++i) s += static_cast<double>(fn.data[o * nd + i]) * x[i];
    mix[o] = s * r;
  }
  return mix;
}

// Sinkhorn as hc_split_sinkhorn: c[j][k] = softmax_k + eps; columns; (iters-1) x {rows, columns}.
std::vector<double> RefSinkhorn(std::vector<double> c, int n, int iters, double eps) {
  auto at = [&c, n](int j, int k) -> double& { return c[static_cast<size_t>(j * n + k)]; };
  auto columns = [&] {
    for (int k = 0; k < n; ++k) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += at(j, k);
      for (int j = 0; j < n; ++j) at(j, k) /= s + eps;
    }
  };
  auto rows = [&] {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += at(j, k);
      for (int k = 0; k < n; ++k) at(j, k) /= s + eps;
    }
  };
  for (int j = 0; j < n; ++j) {
    double mx = at(j, 0);
    for (int k = 1; k < n; ++k) mx = std::max(mx, at(j, k));
    double s = 0;
    for (int k = 0; k < n; ++k) s += std::exp(at(j, k) - mx);
    for (int k = 0; k < n; ++k) at(j, k) = std::exp(at(j, k) - mx) / s + eps;
  }
  columns();
  for (int it = 1; it < iters; ++it) {
    rows();
    columns();
  }
  return c;
}

struct RefPreResult {
  std::vector<double> pre, post, comb, u;
};

RefPreResult RefPre(const MhcParams& p, const HcWeights& w, const float* x) {
  const int n = p.n;
  const int64_t nd = static_cast<int64_t>(n) * p.dim;
  const std::vector<double> mix = RefMix(w.fn, (2 + n) * n, x, nd, p.norm_eps);
  const std::vector<float>& b = w.base.data;
  const std::vector<float>& s = w.scale.data;
  RefPreResult r;
  for (int j = 0; j < n; ++j) r.pre.push_back(Sig(mix[j] * s[0] + b[j]) + p.hc_eps);
  for (int j = 0; j < n; ++j) r.post.push_back(2 * Sig(mix[n + j] * s[1] + b[n + j]));
  std::vector<double> logits;
  for (int c = 0; c < n * n; ++c) logits.push_back(mix[2 * n + c] * s[2] + b[2 * n + c]);
  r.comb = RefSinkhorn(logits, n, p.sinkhorn_iters, p.hc_eps);
  for (int d = 0; d < p.dim; ++d) {
    double acc = 0;
    for (int i = 0; i < n; ++i) acc += r.pre[i] * x[i * p.dim + d];
    r.u.push_back(acc);
  }
  return r;
}

HcWeights RandomBlockWeights(const MhcParams& p, Rng& rng) {
  const int64_t m = static_cast<int64_t>(2 + p.n) * p.n;
  const int64_t nd = static_cast<int64_t>(p.n) * p.dim;
  // fn entries of size ~1/sqrt(nD) keep the mix O(1) for O(1) inputs.
  const float a = 2.0f / std::sqrt(static_cast<float>(nd));
  HcWeights w;
  w.fn = RandomTensor({m, nd}, rng, -a, a);
  w.base = RandomTensor({m}, rng, -1.0f, 1.0f);
  // Distinct scales, so swapping scale[0..2] changes the result.
  w.scale = Tensor({3});
  w.scale.data = {rng.Uniform(0.3f, 0.6f), rng.Uniform(0.9f, 1.2f), rng.Uniform(1.5f, 2.5f)};
  return w;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// ---- Tests ----------------------------------------------------------------------------------

TEST(MhcTest, PreMatchesDoubleReference) {
  struct Case {
    int dim;
    int iters;
    float x_scale;  // tiny inputs make norm_eps matter in the rsqrt
    uint64_t seed;
  };
  for (const Case& c : {Case{16, 20, 1.0f, 1}, Case{64, 20, 3.0f, 2}, Case{32, 3, 1.0f, 3},
                        Case{16, 20, 3e-4f, 4}, Case{64, 1, 1.0f, 5}}) {
    SCOPED_TRACE(::testing::Message()
                 << "dim " << c.dim << " iters " << c.iters << " seed " << c.seed);
    MhcParams p;
    p.n = 4;
    p.dim = c.dim;
    p.sinkhorn_iters = c.iters;
    Rng rng(c.seed);
    const HcWeights w = RandomBlockWeights(p, rng);
    const std::vector<float> x = RandomVector(p.n * p.dim, rng, -c.x_scale, c.x_scale);

    std::vector<float> u(static_cast<size_t>(p.dim));
    const MhcMix mix = MhcPre(p, w, x.data(), u.data());
    const RefPreResult ref = RefPre(p, w, x.data());

    ASSERT_EQ(mix.pre.size(), 4u);
    ASSERT_EQ(mix.post.size(), 4u);
    ASSERT_EQ(mix.comb.size(), 16u);
    for (int j = 0; j < p.n; ++j) {
      EXPECT_NEAR(mix.pre[j], ref.pre[j], 2e-6) << "pre " << j;
      EXPECT_NEAR(mix.post[j], ref.post[j], 4e-6) << "post " << j;
    }
    for (int k = 0; k < p.n * p.n; ++k) EXPECT_NEAR(mix.comb[k], ref.comb[k], 1e-5) << "comb " << k;
    const double tol = 1e-5 * MaxAbs(ref.u);
    for (int d = 0; d < p.dim; ++d) EXPECT_NEAR(u[d], ref.u[d], tol) << "u " << d;
  }
}

// Largest |row sum - 1| and |column sum - 1| of an n x n comb; every entry must be positive.
std::pair<double, double> StochasticError(const std::vector<float>& comb, int n) {
  double worst_row = 0, worst_col = 0;
  for (int i = 0; i < n; ++i) {
    double row = 0, col = 0;
    for (int j = 0; j < n; ++j) {
      EXPECT_GT(comb[i * n + j], 0.0f);
      row += comb[i * n + j];
      col += comb[j * n + i];
    }
    worst_row = std::max(worst_row, std::fabs(row - 1.0));
    worst_col = std::max(worst_col, std::fabs(col - 1.0));
  }
  return {worst_row, worst_col};
}

TEST(MhcTest, SinkhornIsDoublyStochasticAfterEnoughIterations) {
  MhcParams p;
  p.n = 4;
  p.dim = 32;
  Rng rng(11);
  HcWeights w = RandomBlockWeights(p, rng);
  w.scale.data[2] = 3.0f;  // sharp logits: the softmax alone is far from doubly stochastic
  const std::vector<float> x = RandomVector(p.n * p.dim, rng, -2.0f, 2.0f);
  std::vector<float> u(static_cast<size_t>(p.dim));

  // The last step normalises columns, so a column sums to s / (s + eps): within eps / s of 1 (s
  // can be small after the first softmax, not once the rows are balanced). Rows converge with the
  // iterations.
  double last_row_error = 1e9;
  for (int iters : {1, 5, 20, 200}) {
    p.sinkhorn_iters = iters;
    const auto [row_error, col_error] = StochasticError(MhcPre(p, w, x.data(), u.data()).comb, 4);
    EXPECT_LT(col_error, iters == 1 ? 1e-3 : 1e-5) << iters;
    EXPECT_LT(row_error, last_row_error) << iters;
    last_row_error = row_error;
    if (iters == 1) {
      EXPECT_GT(row_error, 0.05);
    }
    if (iters == 200) {
      EXPECT_LT(row_error, 1e-5);
    }
  }
}

// With fn = 0 the mix is 0, so every logit is its base: the outputs below follow by hand.
// hc_eps = 0.01 makes every place eps enters visible at the 1e-2 level.
class MhcHandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_.n = 4;
    p_.dim = 8;
    p_.hc_eps = 0.01f;
    w_.fn = Tensor({24, 32});  // zeros
    w_.scale = Tensor({3});
    w_.scale.data = {1.0f, 1.0f, 1.0f};
    w_.base = Tensor({24});
    const double l3 = std::log(3.0);
    // pre logits: sigmoid = 0.5, 0.75, 0.25, 0.5.  post logits: sigmoid = 0.5, 0.75, 0.25, 0.9.
    const double pre_post[8] = {0, l3, -l3, 0, 0, l3, -l3, std::log(9.0)};
    for (int i = 0; i < 8; ++i) w_.base.data[i] = static_cast<float>(pre_post[i]);
    // comb logits = log of these rows, so the row softmax gives them back exactly (up to fp32).
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k)
        w_.base.data[8 + j * 4 + k] = static_cast<float>(std::log(kP[j][k]));
    Rng rng(21);
    x_ = RandomVector(32, rng, -1.0f, 1.0f);
  }

  MhcMix Run(int iters) {
    p_.sinkhorn_iters = iters;
    u_.assign(8, 0.0f);
    return MhcPre(p_, w_, x_.data(), u_.data());
  }

  static constexpr double kP[4][4] = {
      {0.1, 0.2, 0.3, 0.4}, {0.4, 0.3, 0.2, 0.1}, {0.25, 0.25, 0.25, 0.25}, {0.2, 0.2, 0.1, 0.5}};
  MhcParams p_;
  HcWeights w_;
  std::vector<float> x_;
  std::vector<float> u_;
};

TEST_F(MhcHandTest, PrePostAndCollapse) {
  const MhcMix mix = Run(20);
  const double pre[4] = {0.51, 0.76, 0.26, 0.51};  // sigmoid + eps
  const double post[4] = {1.0, 1.5, 0.5, 1.8};     // 2 * sigmoid, no eps
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(mix.pre[j], pre[j], 1e-6);
    EXPECT_NEAR(mix.post[j], post[j], 1e-6);
  }
  for (int d = 0; d < 8; ++d) {
    const double u =
        pre[0] * x_[d] + pre[1] * x_[8 + d] + pre[2] * x_[16 + d] + pre[3] * x_[24 + d];
    EXPECT_NEAR(u_[d], u, 1e-6);
  }
}

TEST_F(MhcHandTest, SinkhornOneIteration) {
  // softmax + eps:          column sums + eps:
  //   .11 .21 .31 .41         .99+.01 = 1.00, .99+.01 = 1.00, .89+.01 = 0.90, 1.29+.01 = 1.30
  //   .41 .31 .21 .11
  //   .26 .26 .26 .26
  //   .21 .21 .11 .51
  const double expected[4][4] = {{0.11, 0.21, 0.31 / 0.9, 0.41 / 1.3},
                                 {0.41, 0.31, 0.21 / 0.9, 0.11 / 1.3},
                                 {0.26, 0.26, 0.26 / 0.9, 0.26 / 1.3},
                                 {0.21, 0.21, 0.11 / 0.9, 0.51 / 1.3}};
  const MhcMix mix = Run(1);
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(mix.comb[j * 4 + k], expected[j][k], 1e-6) << j << k;
  // iters = 0 runs the same single column normalisation (the kernel's loop runs iters - 1 times).
  const MhcMix zero = Run(0);
  EXPECT_EQ(zero.comb, mix.comb);
}

TEST_F(MhcHandTest, SinkhornTwoIterations) {
  const double c1[4][4] = {{0.11, 0.21, 0.31 / 0.9, 0.41 / 1.3},
                           {0.41, 0.31, 0.21 / 0.9, 0.11 / 1.3},
                           {0.26, 0.26, 0.26 / 0.9, 0.26 / 1.3},
                           {0.21, 0.21, 0.11 / 0.9, 0.51 / 1.3}};
  // Second iteration: rows divided by (row sum + eps), then columns by (column sum + eps).
  double r[4][4];
  for (int j = 0; j < 4; ++j) {
    const double row_sum = c1[j][0] + c1[j][1] + c1[j][2] + c1[j][3];
    for (int k = 0; k < 4; ++k) r[j][k] = c1[j][k] / (row_sum + 0.01);
  }
  double expected[4][4];
  for (int k = 0; k < 4; ++k) {
    const double col_sum = r[0][k] + r[1][k] + r[2][k] + r[3][k];
    for (int j = 0; j < 4; ++j) expected[j][k] = r[j][k] / (col_sum + 0.01);
  }
  const MhcMix mix = Run(2);
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(mix.comb[j * 4 + k], expected[j][k], 1e-6) << j << k;
  // And the third iteration moves it further (the count is honoured).
  const MhcMix three = Run(3);
  EXPECT_GT(std::fabs(three.comb[3] - mix.comb[3]), 1e-5);
}

TEST(MhcTest, PostUsesCombWithInputStreamFirst) {
  MhcParams p;
  p.n = 4;
  p.dim = 24;
  Rng rng(31);
  MhcMix mix;
  mix.pre = RandomVector(4, rng, 0.0f, 1.0f);
  mix.post = RandomVector(4, rng, 0.0f, 2.0f);
  mix.comb = RandomVector(16, rng, 0.0f, 1.0f);  // deliberately not symmetric
  const std::vector<float> x = RandomVector(4 * 24, rng, -2.0f, 2.0f);
  const std::vector<float> y = RandomVector(24, rng, -2.0f, 2.0f);
  std::vector<float> out(4 * 24, -7.0f);

  MhcPost(p, mix, x.data(), y.data(), out.data());
  for (int j = 0; j < 4; ++j) {
    for (int d = 0; d < 24; ++d) {
      double ref = static_cast<double>(mix.post[j]) * y[d];
      for (int i = 0; i < 4; ++i) ref += static_cast<double>(mix.comb[i * 4 + j]) * x[i * 24 + d];
      EXPECT_NEAR(out[j * 24 + d], ref, 1e-5) << "stream " << j << " d " << d;
    }
  }
}

TEST(MhcTest, HeadMatchesDoubleReference) {
  // A large hc_eps in the first case makes the "+ eps" after the sigmoid visible.
  for (const auto& [dim, hc_eps] : {std::pair{16, 0.05f}, std::pair{64, 1e-6f}}) {
    MhcParams p;
    p.n = 4;
    p.dim = dim;
    p.hc_eps = hc_eps;
    Rng rng(41 + static_cast<uint64_t>(dim));
    const int64_t nd = 4 * dim;
    const float a = 2.0f / std::sqrt(static_cast<float>(nd));
    HcWeights w;
    w.fn = RandomTensor({4, nd}, rng, -a, a);
    w.base = RandomTensor({4}, rng, -1.0f, 1.0f);
    w.scale = Tensor({1});
    w.scale.data = {1.7f};
    const std::vector<float> x = RandomVector(nd, rng, -1.5f, 1.5f);

    std::vector<float> out(static_cast<size_t>(dim));
    MhcHead(p, w, x.data(), out.data());

    const std::vector<double> mix = RefMix(w.fn, 4, x.data(), nd, p.norm_eps);
    std::vector<double> ref(static_cast<size_t>(dim), 0.0);
    for (int i = 0; i < 4; ++i) {
      const double pre = Sig(mix[i] * w.scale.data[0] + w.base.data[i]) + p.hc_eps;
      for (int d = 0; d < dim; ++d) ref[d] += pre * x[i * dim + d];
    }
    const double tol = 1e-5 * MaxAbs(ref);
    for (int d = 0; d < dim; ++d) EXPECT_NEAR(out[d], ref[d], tol) << "dim " << dim << " d " << d;
  }
}

TEST(MhcTest, Deterministic) {
  MhcParams p;
  p.n = 4;
  p.dim = 64;
  Rng rng(51);
  const HcWeights w = RandomBlockWeights(p, rng);
  const std::vector<float> x = RandomVector(4 * 64, rng, -1.0f, 1.0f);
  std::vector<float> u1(64), u2(64);
  const MhcMix a = MhcPre(p, w, x.data(), u1.data());
  const MhcMix b = MhcPre(p, w, x.data(), u2.data());
  EXPECT_EQ(a.pre, b.pre);
  EXPECT_EQ(a.post, b.post);
  EXPECT_EQ(a.comb, b.comb);
  EXPECT_EQ(u1, u2);
}

TEST(MhcTest, ParamsFromConfig) {
  ModelConfig cfg;
  cfg.hc_mult = 4;
  cfg.dim = 48;
  cfg.hc_sinkhorn_iters = 7;
  cfg.hc_eps = 2e-6;
  cfg.norm_eps = 3e-6;
  const MhcParams p = MhcParamsFromConfig(cfg);
  EXPECT_EQ(p.n, 4);
  EXPECT_EQ(p.dim, 48);
  EXPECT_EQ(p.sinkhorn_iters, 7);
  EXPECT_FLOAT_EQ(p.hc_eps, 2e-6f);
  EXPECT_FLOAT_EQ(p.norm_eps, 3e-6f);
}

}  // namespace
}  // namespace nw::cpu
