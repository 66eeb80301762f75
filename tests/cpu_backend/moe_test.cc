// MoE (engine/cpu/moe.h) against plain double-precision formulations written here from the
// reference (Gate, Expert, MoE), plus hand-built cases for the routing rules: bias for selection
// only, hash routing through tid2eid, tie-breaking, renormalisation, route_scale and the clamp.
#include "engine/cpu/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
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
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

 private:
  SplitMix64 stream_;
};

Tensor RandomTensor(std::vector<int64_t> shape, Rng& rng, float amplitude) {
  Tensor t(std::move(shape));
  for (float& v : t.data) v = rng.Uniform(-amplitude, amplitude);
  return t;
}

std::vector<float> RandomVector(int64_t n, Rng& rng, float amplitude) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = rng.Uniform(-amplitude, amplitude);
  return v;
}

constexpr int kVocab = 7;

ModelConfig SmallConfig(int dim, int experts, int inter, ScoreFunc score_func) {
  ModelConfig cfg;
  cfg.vocab_size = kVocab;
  cfg.dim = dim;
  cfg.n_routed_experts = experts;
  cfg.n_activated_experts = 2;
  cfg.moe_inter_dim = inter;
  cfg.score_func = score_func;
  cfg.route_scale = 1.5;
  cfg.n_hash_layers = 1;
  cfg.swiglu_limit = 10.0;
  return cfg;
}

ExpertWeights RandomExpert(const ModelConfig& cfg, Rng& rng, float amplitude) {
  const int64_t d = cfg.dim, i = cfg.moe_inter_dim;
  ExpertWeights e;
  e.w1 = RandomTensor({i, d}, rng, amplitude);
  e.w3 = RandomTensor({i, d}, rng, amplitude);
  e.w2 = RandomTensor({d, i}, rng, 1.0f / std::sqrt(static_cast<float>(i)));
  return e;
}

// Gate weights and bias (bias left empty for a hash layer, tid2eid filled with distinct ids per
// row), `amplitude` sizes w1/w3 (and so how often the clamp bites).
FfnWeights RandomFfn(const ModelConfig& cfg, bool hash, Rng& rng, float amplitude) {
  const int e = cfg.n_routed_experts, k = cfg.n_activated_experts;
  FfnWeights w;
  w.gate = RandomTensor({e, cfg.dim}, rng, 2.0f / std::sqrt(static_cast<float>(cfg.dim)));
  if (hash) {
    for (int t = 0; t < kVocab; ++t) {
      std::vector<int32_t> ids(static_cast<size_t>(e));
      std::iota(ids.begin(), ids.end(), 0);
      for (int s = 0; s < k; ++s) {
        std::swap(ids[s], ids[s + rng.Below(e - s)]);
        w.tid2eid.push_back(ids[s]);
      }
    }
  } else {
    w.gate_bias = RandomTensor({e}, rng, 0.3f);
  }
  for (int i = 0; i < e; ++i) w.experts.push_back(RandomExpert(cfg, rng, amplitude));
  w.shared = RandomExpert(cfg, rng, amplitude);
  return w;
}

// ---- Double-precision reference -------------------------------------------------------------

std::vector<double> RefScores(const ModelConfig& cfg, const FfnWeights& w, const float* x) {
  const int e = cfg.n_routed_experts;
  std::vector<double> s(static_cast<size_t>(e));
  for (int i = 0; i < e; ++i) {
    double acc = 0;
    for (int d = 0; d < cfg.dim; ++d)
      acc += static_cast<double>(w.gate.data[i * cfg.dim + d]) * x[d];
    s[i] = acc;
  }
  if (cfg.score_func == ScoreFunc::kSoftmax) {
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (double& v : s) v /= sum;
  } else if (cfg.score_func == ScoreFunc::kSigmoid) {
    for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
  } else {
    for (double& v : s) v = std::sqrt(std::log1p(std::exp(v)));
  }
  return s;
}

struct RefRouting {
  std::vector<int32_t> experts;
  std::vector<double> weights;
};

RefRouting RefRoute(const ModelConfig& cfg, const FfnWeights& w, int layer, const float* x,
                    int32_t token) {
  const std::vector<double> s = RefScores(cfg, w, x);
  const int k = cfg.n_activated_experts;
  RefRouting r;
  if (layer < cfg.n_hash_layers) {
    for (int i = 0; i < k; ++i) r.experts.push_back(w.tid2eid[token * k + i]);
  } else {
    std::vector<double> biased = s;
    for (size_t i = 0; i < biased.size(); ++i) biased[i] += w.gate_bias.data[i];
    std::vector<int32_t> order(biased.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return biased[a] > biased[b]; });
    r.experts.assign(order.begin(), order.begin() + k);
  }
  double sum = 0;
  for (int32_t e : r.experts) sum += s[e];
  for (int32_t e : r.experts) {
    const double v = cfg.score_func == ScoreFunc::kSoftmax ? s[e] : s[e] / sum;
    r.weights.push_back(v * cfg.route_scale);
  }
  return r;
}

enum class Clamp { kNone, kReference, kGateBothSides };

// weight * w2(silu(g) * u), g = w1 x, u = w3 x, clamped as asked.
std::vector<double> RefExpert(const ModelConfig& cfg, const ExpertWeights& e, const float* x,
                              double weight, double limit, Clamp clamp) {
  const int d = cfg.dim, inter = cfg.moe_inter_dim;
  std::vector<double> h(static_cast<size_t>(inter));
  for (int i = 0; i < inter; ++i) {
    double g = 0, u = 0;
    for (int j = 0; j < d; ++j) {
      g += static_cast<double>(e.w1.data[i * d + j]) * x[j];
      u += static_cast<double>(e.w3.data[i * d + j]) * x[j];
    }
    if (clamp != Clamp::kNone) {
      u = std::clamp(u, -limit, limit);
      g = clamp == Clamp::kReference ? std::min(g, limit) : std::clamp(g, -limit, limit);
    }
    h[i] = g / (1.0 + std::exp(-g)) * u;
  }
  std::vector<double> y(static_cast<size_t>(d));
  for (int o = 0; o < d; ++o) {
    double acc = 0;
    for (int i = 0; i < inter; ++i) acc += static_cast<double>(e.w2.data[o * inter + i]) * h[i];
    y[o] = weight * acc;
  }
  return y;
}

struct RefOptions {
  Clamp routed = Clamp::kReference;
  Clamp shared = Clamp::kNone;
};

// The clamps the config asks for: routed experts always, the shared expert when
// swiglu_clamp_shared_expert (the default).
RefOptions ConfigClamps(const ModelConfig& cfg) {
  return {Clamp::kReference, cfg.swiglu_clamp_shared_expert ? Clamp::kReference : Clamp::kNone};
}

std::vector<double> RefForward(const ModelConfig& cfg, const FfnWeights& w, int layer,
                               const float* x, int32_t token, RefOptions opt) {
  const RefRouting r = RefRoute(cfg, w, layer, x, token);
  std::vector<double> out(static_cast<size_t>(cfg.dim), 0.0);
  auto add = [&out](const std::vector<double>& y) {
    for (size_t i = 0; i < y.size(); ++i) out[i] += y[i];
  };
  for (size_t s = 0; s < r.experts.size(); ++s) {
    add(RefExpert(cfg, w.experts[r.experts[s]], x, r.weights[s], cfg.swiglu_limit, opt.routed));
  }
  add(RefExpert(cfg, w.shared, x, 1.0, cfg.swiglu_limit, opt.shared));
  return out;
}

std::vector<double> RefForward(const ModelConfig& cfg, const FfnWeights& w, int layer,
                               const float* x, int32_t token) {
  return RefForward(cfg, w, layer, x, token, ConfigClamps(cfg));
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void ExpectCloseRel(const std::vector<float>& got, const std::vector<double>& ref, double rel) {
  ASSERT_EQ(got.size(), ref.size());
  const double tol = rel * MaxAbs(ref);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], tol) << "index " << i;
}

// A gate whose logits are exactly `logits` for x = e_0 (the first unit vector).
FfnWeights UnitGate(const ModelConfig& cfg, const std::vector<float>& logits) {
  FfnWeights w;
  w.gate = Tensor({cfg.n_routed_experts, cfg.dim});
  for (int e = 0; e < cfg.n_routed_experts; ++e) w.gate.data[e * cfg.dim] = logits[e];
  w.gate_bias = Tensor({cfg.n_routed_experts});
  return w;
}

std::vector<float> UnitX(const ModelConfig& cfg) {
  std::vector<float> x(static_cast<size_t>(cfg.dim), 0.0f);
  x[0] = 1.0f;
  return x;
}

double SqrtSoftplus(double v) { return std::sqrt(std::log1p(std::exp(v))); }

// ---- Routing --------------------------------------------------------------------------------

TEST(MoeRouteTest, MatchesDoubleReferenceForEveryScoreFunc) {
  for (ScoreFunc f : {ScoreFunc::kSqrtSoftplus, ScoreFunc::kSoftmax, ScoreFunc::kSigmoid}) {
    for (bool hash : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "score func " << static_cast<int>(f) << " hash " << hash);
      ModelConfig cfg = SmallConfig(32, 16, 8, f);
      Rng rng(100 + static_cast<uint64_t>(f) * 2 + hash);
      const FfnWeights w = RandomFfn(cfg, hash, rng, 0.3f);
      const int layer = hash ? 0 : 1;
      for (int32_t token = 0; token < kVocab; ++token) {
        const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);
        const MoeRouting r = MoeRoute(cfg, w, layer, x.data(), token);
        const RefRouting ref = RefRoute(cfg, w, layer, x.data(), token);
        EXPECT_EQ(r.experts, ref.experts) << "token " << token;
        ASSERT_EQ(r.weights.size(), ref.weights.size());
        for (size_t s = 0; s < ref.weights.size(); ++s)
          EXPECT_NEAR(r.weights[s], ref.weights[s], 1e-6 * cfg.route_scale) << "slot " << s;
      }
    }
  }
}

TEST(MoeRouteTest, BiasSelectsButDoesNotWeight) {
  ModelConfig cfg = SmallConfig(16, 8, 8, ScoreFunc::kSqrtSoftplus);
  const std::vector<float> logits = {3, 2, 1, 0, -1, -2, -3, -4};
  FfnWeights w = UnitGate(cfg, logits);
  const std::vector<float> x = UnitX(cfg);

  // No bias: the two largest scores, experts 0 and 1.
  MoeRouting r = MoeRoute(cfg, w, /*layer_id=*/1, x.data(), 0);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{0, 1}));
  double s0 = SqrtSoftplus(3), s1 = SqrtSoftplus(2);
  EXPECT_NEAR(r.weights[0], 1.5 * s0 / (s0 + s1), 1e-6);
  EXPECT_NEAR(r.weights[1], 1.5 * s1 / (s0 + s1), 1e-6);

  // A bias of +10 on expert 6 puts it first; its weight still comes from its own unbiased score.
  w.gate_bias.data[6] = 10.0f;
  r = MoeRoute(cfg, w, 1, x.data(), 0);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{6, 0}));
  const double s6 = SqrtSoftplus(-3);
  EXPECT_NEAR(r.weights[0], 1.5 * s6 / (s6 + s0), 1e-6);
  EXPECT_NEAR(r.weights[1], 1.5 * s0 / (s6 + s0), 1e-6);

  // A negative bias pushes expert 0 out.
  w.gate_bias.data[0] = -5.0f;
  r = MoeRoute(cfg, w, 1, x.data(), 0);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{6, 1}));
}

TEST(MoeRouteTest, HashLayerUsesTid2eidAndIgnoresBias) {
  ModelConfig cfg = SmallConfig(16, 8, 8, ScoreFunc::kSqrtSoftplus);
  cfg.n_hash_layers = 2;
  const std::vector<float> logits = {3, 2, 1, 0, -1, -2, -3, -4};
  FfnWeights w = UnitGate(cfg, logits);
  w.gate_bias.data = {0, 0, 0, 0, 0, 50, 0, 0};  // would select expert 5 first if it were used
  w.tid2eid = {0, 1, 2, 3, 4, 5, 7, 2, 6, 0, 1, 7, 3, 4};  // [kVocab = 7, k = 2]
  const std::vector<float> x = UnitX(cfg);

  for (int layer : {0, 1}) {
    const MoeRouting r = MoeRoute(cfg, w, layer, x.data(), /*token_id=*/3);
    ASSERT_EQ(r.experts, (std::vector<int32_t>{7, 2})) << "layer " << layer;
    const double s7 = SqrtSoftplus(-4), s2 = SqrtSoftplus(1);
    EXPECT_NEAR(r.weights[0], 1.5 * s7 / (s7 + s2), 1e-6);
    EXPECT_NEAR(r.weights[1], 1.5 * s2 / (s7 + s2), 1e-6);
  }
  EXPECT_EQ(MoeRoute(cfg, w, 0, x.data(), 5).experts, (std::vector<int32_t>{1, 7}));
  // Layer 2 is past n_hash_layers: score top-k with the bias.
  EXPECT_EQ(MoeRoute(cfg, w, 2, x.data(), 3).experts, (std::vector<int32_t>{5, 0}));
  // Token ids outside the table are rejected, not read out of bounds.
  EXPECT_THROW(MoeRoute(cfg, w, 0, x.data(), kVocab), std::out_of_range);
  EXPECT_THROW(MoeRoute(cfg, w, 0, x.data(), -1), std::out_of_range);
}

TEST(MoeRouteTest, TiesGoToTheLowestExpertId) {
  ModelConfig cfg = SmallConfig(16, 8, 8, ScoreFunc::kSqrtSoftplus);
  const std::vector<float> x = UnitX(cfg);
  // All equal: experts 0 and 1.
  FfnWeights w = UnitGate(cfg, std::vector<float>(8, 0.5f));
  MoeRouting r = MoeRoute(cfg, w, 1, x.data(), 0);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.weights[0], 0.75, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.75, 1e-6);
  // Three-way tie for first among 3, 5, 6 (equal logits and equal biases): 3 then 5.
  w = UnitGate(cfg, {0, 1, 0, 2, 0, 2, 2, 1});
  w.gate_bias.data = {0.5f, 0, 0, 0.25f, 0, 0.25f, 0.25f, 0};
  r = MoeRoute(cfg, w, 1, x.data(), 0);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 5}));
  // A tie for second place, behind a clear first: the lower id again.
  w = UnitGate(cfg, {0, 1, 0, 1, 0, 3, 1, 0});
  w.gate_bias = Tensor({8});
  r = MoeRoute(cfg, w, 1, x.data(), 0);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{5, 1}));
}

TEST(MoeRouteTest, SoftmaxIsNotRenormalisedOthersAre) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.5f, 0.25f};
  double z = 0;
  for (float l : logits) z += std::exp(l);

  ModelConfig cfg = SmallConfig(8, 4, 8, ScoreFunc::kSoftmax);
  cfg.route_scale = 2.5;
  const FfnWeights w = UnitGate(cfg, logits);
  const std::vector<float> x = UnitX(cfg);
  MoeRouting r = MoeRoute(cfg, w, 1, x.data(), 0);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.weights[0], 2.5 * std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * std::exp(0.5) / z, 1e-6);

  cfg.score_func = ScoreFunc::kSigmoid;
  r = MoeRoute(cfg, w, 1, x.data(), 0);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{0, 1}));
  const double a = 1 / (1 + std::exp(-1.0)), b = 1 / (1 + std::exp(-0.5));
  EXPECT_NEAR(r.weights[0], 2.5 * a / (a + b), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * b / (a + b), 1e-6);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.5, 1e-6);
}

// ---- Forward --------------------------------------------------------------------------------

TEST(MoeForwardTest, MatchesDoubleReference) {
  struct Case {
    int dim, experts, inter;
    ScoreFunc f;
    bool hash;
    uint64_t seed;
  };
  const Case cases[] = {{16, 4, 8, ScoreFunc::kSqrtSoftplus, false, 1},
                        {64, 16, 32, ScoreFunc::kSqrtSoftplus, false, 2},
                        {32, 8, 16, ScoreFunc::kSqrtSoftplus, true, 3},
                        {32, 8, 16, ScoreFunc::kSoftmax, false, 4},
                        {48, 16, 24, ScoreFunc::kSigmoid, true, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "dim " << c.dim << " E " << c.experts << " I " << c.inter
                                      << " hash " << c.hash);
    ModelConfig cfg = SmallConfig(c.dim, c.experts, c.inter, c.f);
    Rng rng(200 + c.seed);
    const FfnWeights w = RandomFfn(cfg, c.hash, rng, 0.5f);
    for (int32_t token = 0; token < 3; ++token) {
      const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);
      std::vector<float> out(static_cast<size_t>(cfg.dim), 123.0f);
      MoeForward(cfg, w, c.hash ? 0 : 1, x.data(), token, out.data());
      ExpectCloseRel(out, RefForward(cfg, w, c.hash ? 0 : 1, x.data(), token), 1e-5);
    }
  }
}

// swiglu_limit = 1 with large w1/w3: most gates and ups exceed the limit. With
// swiglu_clamp_shared_expert false (DeepSeek's first release) the clamp applies to the routed
// experts only, as min(g, lim) and clamp(u, -lim, lim).
TEST(MoeForwardTest, ClampOnRoutedExpertsOnlyWhenTheSharedClampIsOff) {
  for (ScoreFunc f : {ScoreFunc::kSqrtSoftplus, ScoreFunc::kSoftmax}) {
    ModelConfig cfg = SmallConfig(32, 8, 16, f);
    cfg.swiglu_limit = 1.0;
    cfg.swiglu_clamp_shared_expert = false;
    Rng rng(300 + static_cast<uint64_t>(f));
    const FfnWeights w = RandomFfn(cfg, false, rng, 1.0f);
    const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);

    std::vector<float> out(static_cast<size_t>(cfg.dim));
    MoeForward(cfg, w, 1, x.data(), 0, out.data());
    const std::vector<double> ref = RefForward(cfg, w, 1, x.data(), 0);
    ExpectCloseRel(out, ref, 1e-5);

    // The inputs exercise every part of the clamp: each variant below (no clamp, a lower bound on
    // the gate, a clamped shared expert) moves the output at least 100x the tolerance above.
    const double scale = MaxAbs(ref);
    EXPECT_GT(MaxAbsDiff(ref, RefForward(cfg, w, 1, x.data(), 0, {Clamp::kNone, Clamp::kNone})),
              0.1 * scale);
    EXPECT_GT(
        MaxAbsDiff(ref, RefForward(cfg, w, 1, x.data(), 0, {Clamp::kGateBothSides, Clamp::kNone})),
        1e-3 * scale);
    EXPECT_GT(
        MaxAbsDiff(ref, RefForward(cfg, w, 1, x.data(), 0, {Clamp::kReference, Clamp::kReference})),
        0.1 * scale);
  }
}

// The current definition (the default): the shared expert is clamped exactly as the routed
// experts. Checked against the double reference on every entry point, and against the unclamped
// variant, which must differ.
TEST(MoeForwardTest, SharedExpertClampedByDefault) {
  for (ScoreFunc f : {ScoreFunc::kSqrtSoftplus, ScoreFunc::kSoftmax}) {
    ModelConfig cfg = SmallConfig(32, 8, 16, f);
    cfg.swiglu_limit = 1.0;
    ASSERT_TRUE(cfg.swiglu_clamp_shared_expert);
    Rng rng(700 + static_cast<uint64_t>(f));
    const FfnWeights w = RandomFfn(cfg, false, rng, 1.0f);
    const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);

    const std::vector<double> ref = RefForward(cfg, w, 1, x.data(), 0);
    const std::vector<double> both =
        RefForward(cfg, w, 1, x.data(), 0, {Clamp::kReference, Clamp::kReference});
    EXPECT_EQ(ref, both);
    std::vector<float> out(static_cast<size_t>(cfg.dim));
    MoeForward(cfg, w, 1, x.data(), 0, out.data());
    ExpectCloseRel(out, ref, 1e-5);
    MoeForwardRanks(cfg, w, 1, x.data(), 0, 4, out.data());
    ExpectCloseRel(out, ref, 1e-5);
    MoeForwardRows(cfg, w, 1, x.data(), std::vector<int32_t>{0}.data(), 1, out.data());
    ExpectCloseRel(out, ref, 1e-5);
    EXPECT_GT(
        MaxAbsDiff(ref, RefForward(cfg, w, 1, x.data(), 0, {Clamp::kReference, Clamp::kNone})),
        0.1 * MaxAbs(ref));
  }
}

// A constructed input: only the shared expert is non-zero (routed w2 zeroed), and its gate and
// up pre-activations are exactly g = u = a for x = e_0. With a above the limit the two settings
// differ by exactly silu(a) a - silu(lim) lim; with a below they are bit-identical.
TEST(MoeForwardTest, SharedClampOnAndOffDifferOnlyAboveTheLimit) {
  ModelConfig cfg = SmallConfig(16, 4, 8, ScoreFunc::kSqrtSoftplus);
  cfg.swiglu_limit = 2.0;
  FfnWeights w = UnitGate(cfg, {0.5f, 0.25f, 0, -0.25f});
  for (int e = 0; e < cfg.n_routed_experts; ++e) {
    ExpertWeights ex;
    ex.w1 = Tensor({cfg.moe_inter_dim, cfg.dim});
    ex.w3 = Tensor({cfg.moe_inter_dim, cfg.dim});
    ex.w2 = Tensor({cfg.dim, cfg.moe_inter_dim});
    w.experts.push_back(ex);
  }
  const std::vector<float> x = UnitX(cfg);
  const std::vector<int32_t> token = {0};
  for (float a : {0.5f, 1.5f, 1.999f, 2.5f, 7.0f}) {
    SCOPED_TRACE(a);
    w.shared.w1 = Tensor({cfg.moe_inter_dim, cfg.dim});
    w.shared.w3 = Tensor({cfg.moe_inter_dim, cfg.dim});
    w.shared.w2 = Tensor({cfg.dim, cfg.moe_inter_dim});
    for (int i = 0; i < cfg.moe_inter_dim; ++i) {
      w.shared.w1.data[static_cast<size_t>(i * cfg.dim)] = a;
      w.shared.w3.data[static_cast<size_t>(i * cfg.dim)] = a;
    }
    w.shared.w2.data[0] = 1.0f;  // out[0] = h[0]
    std::vector<float> on(static_cast<size_t>(cfg.dim)), off(on.size()), rows(on.size()),
        ranks(on.size());
    cfg.swiglu_clamp_shared_expert = true;
    MoeForward(cfg, w, 1, x.data(), 0, on.data());
    MoeForwardRows(cfg, w, 1, x.data(), token.data(), 1, rows.data());
    MoeForwardRanks(cfg, w, 1, x.data(), 0, 2, ranks.data());
    EXPECT_EQ(rows, on);
    EXPECT_EQ(ranks, on);
    cfg.swiglu_clamp_shared_expert = false;
    MoeForward(cfg, w, 1, x.data(), 0, off.data());
    MoeForwardRows(cfg, w, 1, x.data(), token.data(), 1, rows.data());
    MoeForwardRanks(cfg, w, 1, x.data(), 0, 2, ranks.data());
    EXPECT_EQ(rows, off);
    EXPECT_EQ(ranks, off);

    const double lim = cfg.swiglu_limit;
    auto swiglu = [](double g, double u) { return g / (1.0 + std::exp(-g)) * u; };
    EXPECT_NEAR(off[0], swiglu(a, a), 1e-5 * swiglu(a, a));
    if (a < lim) {
      EXPECT_EQ(on, off);
    } else {
      EXPECT_NEAR(on[0], swiglu(lim, lim), 1e-5 * swiglu(lim, lim));
      EXPECT_GT(off[0] - on[0], 0.1);
    }
    for (int d = 1; d < cfg.dim; ++d) EXPECT_EQ(on[static_cast<size_t>(d)], 0.0f);
  }
}

// MoeForwardRows is bit-identical to MoeForward row by row with the shared clamp on and off, on
// inputs where the clamp bites, including a hash layer with a token routed twice to one expert.
TEST(MoeForwardTest, RowsEqualsRowByRowWithTheSharedClamp) {
  for (bool clamp_shared : {true, false}) {
    for (bool hash : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "clamp_shared " << clamp_shared << " hash " << hash);
      ModelConfig cfg = SmallConfig(32, 8, 16, ScoreFunc::kSqrtSoftplus);
      cfg.swiglu_limit = 1.0;
      cfg.swiglu_clamp_shared_expert = clamp_shared;
      Rng rng(800 + static_cast<uint64_t>(hash));
      FfnWeights w = RandomFfn(cfg, hash, rng, 1.0f);
      if (hash) {
        w.tid2eid[2 * 2] = 3;  // token 2: expert 3 twice
        w.tid2eid[2 * 2 + 1] = 3;
      }
      const int layer = hash ? 0 : 1;
      const std::vector<int32_t> tokens = {2, 0, 2, 5, 6, 1};
      const auto rows = static_cast<int64_t>(tokens.size());
      const std::vector<float> x = RandomVector(rows * cfg.dim, rng, 1.0f);
      std::vector<float> together(x.size()), alone(x.size());
      MoeForwardRows(cfg, w, layer, x.data(), tokens.data(), rows, together.data());
      for (int64_t t = 0; t < rows; ++t) {
        MoeForward(cfg, w, layer, x.data() + t * cfg.dim, tokens[static_cast<size_t>(t)],
                   alone.data() + t * cfg.dim);
        const std::vector<double> ref =
            RefForward(cfg, w, layer, x.data() + t * cfg.dim, tokens[static_cast<size_t>(t)]);
        ExpectCloseRel(
            std::vector<float>(alone.begin() + t * cfg.dim, alone.begin() + (t + 1) * cfg.dim), ref,
            1e-5);
      }
      EXPECT_EQ(together, alone);
    }
  }
}

TEST(MoeForwardTest, NoClampWhenLimitIsZero) {
  ModelConfig cfg = SmallConfig(32, 8, 16, ScoreFunc::kSqrtSoftplus);
  cfg.swiglu_limit = 0;
  Rng rng(400);
  const FfnWeights w = RandomFfn(cfg, false, rng, 1.0f);
  const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);
  std::vector<float> out(static_cast<size_t>(cfg.dim));
  MoeForward(cfg, w, 1, x.data(), 0, out.data());
  ExpectCloseRel(out, RefForward(cfg, w, 1, x.data(), 0, {Clamp::kNone, Clamp::kNone}), 1e-5);
}

// out = shared(x) + sum_k weight_k expert_k(x): check the pieces separately by zeroing experts.
TEST(MoeForwardTest, WeightsScaleTheRoutedExperts) {
  ModelConfig cfg = SmallConfig(16, 4, 8, ScoreFunc::kSqrtSoftplus);
  cfg.route_scale = 2.0;
  Rng rng(500);
  FfnWeights w = RandomFfn(cfg, false, rng, 0.5f);
  const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);
  const MoeRouting r = MoeRoute(cfg, w, 1, x.data(), 0);

  // Only the first selected expert left non-zero, shared expert zeroed.
  for (int e = 0; e < cfg.n_routed_experts; ++e) {
    if (e != r.experts[0]) w.experts[e].w2 = Tensor({cfg.dim, cfg.moe_inter_dim});
  }
  w.shared.w2 = Tensor({cfg.dim, cfg.moe_inter_dim});
  std::vector<float> out(static_cast<size_t>(cfg.dim));
  MoeForward(cfg, w, 1, x.data(), 0, out.data());
  const std::vector<double> unit =
      RefExpert(cfg, w.experts[r.experts[0]], x.data(), 1.0, cfg.swiglu_limit, Clamp::kReference);
  std::vector<double> expected(unit.size());
  for (size_t i = 0; i < unit.size(); ++i) expected[i] = r.weights[0] * unit[i];
  ExpectCloseRel(out, expected, 1e-5);
}

TEST(MoeForwardTest, Deterministic) {
  ModelConfig cfg = SmallConfig(64, 16, 32, ScoreFunc::kSqrtSoftplus);
  Rng rng(600);
  const FfnWeights w = RandomFfn(cfg, false, rng, 0.5f);
  const std::vector<float> x = RandomVector(cfg.dim, rng, 1.0f);
  std::vector<float> a(64), b(64);
  MoeForward(cfg, w, 1, x.data(), 0, a.data());
  MoeForward(cfg, w, 1, x.data(), 0, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace nw::cpu
