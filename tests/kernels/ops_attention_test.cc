// Sparse attention with sink, grouped output projection, indexer logits and compressor pooling,
// each against plain loops in double on deterministic random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace nw::cpu {
namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  float Uniform(float lo, float hi) {
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(s_ >> 40) * 0x1p-24);
  }
  std::vector<float> Vec(size_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (float& x : v) x = Uniform(lo, hi);
    return v;
  }

 private:
  uint64_t s_;
};

// out_h = sum_j e^{z} kv_j / (sum_j e^{z} + e^{sink}) in double, no shift.
std::vector<double> DenseAttention(const std::vector<float>& q, const std::vector<const float*>& kv,
                                   const std::vector<float>& sink, int H, int d, double scale) {
  std::vector<double> out(static_cast<size_t>(H * d), 0.0);
  for (int h = 0; h < H; ++h) {
    double denom = std::exp(static_cast<double>(sink[static_cast<size_t>(h)]));
    std::vector<double> e(kv.size());
    for (size_t j = 0; j < kv.size(); ++j) {
      double z = 0;
      for (int i = 0; i < d; ++i)
        z += static_cast<double>(q[static_cast<size_t>(h * d + i)]) * kv[j][i];
      e[j] = std::exp(scale * z);
      denom += e[j];
    }
    for (size_t j = 0; j < kv.size(); ++j) {
      for (int i = 0; i < d; ++i) out[static_cast<size_t>(h * d + i)] += e[j] * kv[j][i] / denom;
    }
  }
  return out;
}

TEST(SparseAttentionTest, MatchesDenseSoftmaxWithSink) {
  Rng rng(1);
  for (int n : {1, 2, 7, 64, 144}) {
    const int H = 4, d = 128;
    const std::vector<float> q = rng.Vec(static_cast<size_t>(H * d), -2, 2);
    const std::vector<float> sink = rng.Vec(static_cast<size_t>(H), -2, 2);
    std::vector<std::vector<float>> rows;
    for (int j = 0; j < n; ++j) rows.push_back(rng.Vec(static_cast<size_t>(d)));
    std::vector<const float*> kv;
    for (const auto& r : rows) kv.push_back(r.data());
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> out(static_cast<size_t>(H * d)), scratch(static_cast<size_t>(H * (n + 1)));
    SparseAttention({H, d, scale}, q.data(), kv.data(), n, sink.data(), out.data(), scratch.data());
    const std::vector<double> want = DenseAttention(q, kv, sink, H, d, scale);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << "n " << n;
  }
}

TEST(SparseAttentionTest, EntryOrderDoesNotMatterBeyondRounding) {
  Rng rng(2);
  const int H = 2, d = 64, n = 20;
  const std::vector<float> q = rng.Vec(H * d), sink = rng.Vec(H);
  std::vector<std::vector<float>> rows;
  for (int j = 0; j < n; ++j) rows.push_back(rng.Vec(d));
  std::vector<const float*> kv, rev;
  for (const auto& r : rows) kv.push_back(r.data());
  rev.assign(kv.rbegin(), kv.rend());
  std::vector<float> a(H * d), b(H * d), scratch(H * (n + 1));
  SparseAttention({H, d, 0.125f}, q.data(), kv.data(), n, sink.data(), a.data(), scratch.data());
  SparseAttention({H, d, 0.125f}, q.data(), rev.data(), n, sink.data(), b.data(), scratch.data());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST(SparseAttentionTest, NoEntriesGivesZero) {
  const int H = 3, d = 8;
  std::vector<float> q(H * d, 1.0f), sink = {0.0f, 5.0f, -5.0f}, out(H * d, 42.0f), scratch(H);
  SparseAttention({H, d, 1.0f}, q.data(), nullptr, 0, sink.data(), out.data(), scratch.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(SparseAttentionTest, LargeLogitsAndSinkStayFinite) {
  // Logits of +-1000 would overflow exp() without the shift; a huge sink drives the output to 0.
  const int H = 2, d = 4;
  std::vector<float> q = {1000, 0, 0, 0, 1000, 0, 0, 0};
  std::vector<float> k0 = {1, 0, 0, 0}, k1 = {-1, 0, 0, 0};
  std::vector<const float*> kv = {k0.data(), k1.data()};
  std::vector<float> sink = {-1e30f, 1e4f}, out(H * d), scratch(H * 3);
  SparseAttention({H, d, 1.0f}, q.data(), kv.data(), 2, sink.data(), out.data(), scratch.data());
  EXPECT_FLOAT_EQ(out[0], 1.0f);  // all weight on k0
  for (int i = 1; i < 4; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 0.0f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(std::fabs(out[static_cast<size_t>(i)]), 0.0f);
}

TEST(GroupedLinearTest, MatchesPlainLoops) {
  Rng rng(3);
  const int groups = 2;
  const int64_t group_in = 256, rank = 64;
  const std::vector<float> x = rng.Vec(static_cast<size_t>(groups * group_in));
  const std::vector<float> w = rng.Vec(static_cast<size_t>(groups * rank * group_in));
  std::vector<float> y(static_cast<size_t>(groups * rank));
  GroupedLinear(x.data(), w.data(), groups, group_in, rank, y.data());
  for (int g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < rank; ++r) {
      double want = 0;
      for (int64_t i = 0; i < group_in; ++i) {
        want += static_cast<double>(w[static_cast<size_t>((g * rank + r) * group_in + i)]) *
                x[static_cast<size_t>(g * group_in + i)];
      }
      EXPECT_NEAR(y[static_cast<size_t>(g * rank + r)], want, 1e-4);
    }
  }
}

TEST(IndexerScoresTest, MatchesPlainLoopsAndIsSplitInvariant) {
  Rng rng(4);
  const int hI = 4, c = 64;
  const int64_t n = 150;
  const std::vector<float> q = rng.Vec(static_cast<size_t>(hI * c));
  const std::vector<float> w = rng.Vec(static_cast<size_t>(hI));
  const std::vector<float> keys = rng.Vec(static_cast<size_t>(n * c));
  std::vector<float> whole(static_cast<size_t>(n)), split(static_cast<size_t>(n));
  IndexerScores({hI, c}, q.data(), w.data(), keys.data(), n, whole.data());
  for (int64_t first = 0; first < n; first += 64) {
    const int64_t count = std::min<int64_t>(64, n - first);
    IndexerScores({hI, c}, q.data(), w.data(), keys.data() + first * c, count,
                  split.data() + first);
  }
  EXPECT_EQ(whole, split);  // bitwise: paged and contiguous indexers agree
  for (int64_t j = 0; j < n; ++j) {
    double want = 0;
    for (int h = 0; h < hI; ++h) {
      double dot = 0;
      for (int i = 0; i < c; ++i) {
        dot += static_cast<double>(q[static_cast<size_t>(h * c + i)]) *
               keys[static_cast<size_t>(j * c + i)];
      }
      want += w[static_cast<size_t>(h)] * std::max(dot, 0.0);
    }
    EXPECT_NEAR(whole[static_cast<size_t>(j)], want, 1e-4);
  }
}

// Gated pooling in double: rows [span][width], null rows excluded.
std::vector<double> PlainPool(const CompressParams& p, const std::vector<const float*>& kv,
                              const std::vector<const float*>& score) {
  std::vector<double> out(static_cast<size_t>(p.dim), 0.0);
  for (int c = 0; c < p.dim; ++c) {
    double m = -std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < kv.size(); ++k) {
      if (!score[k]) continue;
      const int col = p.overlap && static_cast<int>(k) >= p.ratio ? p.dim + c : c;
      m = std::max(m, static_cast<double>(score[k][col]));
    }
    double z = 0, acc = 0;
    for (size_t k = 0; k < kv.size(); ++k) {
      if (!score[k]) continue;
      const int col = p.overlap && static_cast<int>(k) >= p.ratio ? p.dim + c : c;
      const double e = std::exp(score[k][col] - m);
      z += e;
      acc += e * kv[k][col];
    }
    out[static_cast<size_t>(c)] = acc / z;
  }
  return out;
}

TEST(CompressPoolTest, OverlapRatio4MatchesPlainLoops) {
  Rng rng(5);
  const CompressParams p{4, 128, true};
  std::vector<std::vector<float>> kv_rows, sc_rows;
  for (int k = 0; k < 8; ++k) {
    kv_rows.push_back(rng.Vec(256));
    sc_rows.push_back(rng.Vec(256, -3, 3));
  }
  for (bool first_block : {false, true}) {
    std::vector<const float*> kv, sc;
    for (int k = 0; k < 8; ++k) {
      const bool missing = first_block && k < 4;  // block 0: no previous block
      kv.push_back(missing ? nullptr : kv_rows[static_cast<size_t>(k)].data());
      sc.push_back(missing ? nullptr : sc_rows[static_cast<size_t>(k)].data());
    }
    std::vector<float> out(128), scratch(9 * 128);
    CompressPool(p, kv.data(), sc.data(), out.data(), scratch.data());
    const std::vector<double> want = PlainPool(p, kv, sc);
    for (int c = 0; c < 128; ++c)
      EXPECT_NEAR(out[static_cast<size_t>(c)], want[static_cast<size_t>(c)], 1e-5);
  }
}

TEST(CompressPoolTest, OverlapUsesHalfAForPreviousAndHalfBForCurrent) {
  // Previous block: channel A scores huge -> its kv dominates; current block's A half is ignored.
  const CompressParams p{4, 1, true};
  std::vector<std::vector<float>> kv(8, std::vector<float>(2)), sc(8, std::vector<float>(2));
  for (int k = 0; k < 8; ++k) {
    kv[static_cast<size_t>(k)] = {static_cast<float>(10 + k), static_cast<float>(100 + k)};
    sc[static_cast<size_t>(k)] = {0.0f, 0.0f};
  }
  sc[2] = {50.0f, -1000.0f};  // previous block token 2 dominates via half A
  sc[5] = {1000.0f, 0.0f};    // current block's half A must not matter
  std::vector<const float*> kp, sp;
  for (int k = 0; k < 8; ++k) {
    kp.push_back(kv[static_cast<size_t>(k)].data());
    sp.push_back(sc[static_cast<size_t>(k)].data());
  }
  float out = 0;
  std::vector<float> scratch(9);
  CompressPool(p, kp.data(), sp.data(), &out, scratch.data());
  EXPECT_FLOAT_EQ(out, 12.0f);
}

TEST(CompressPoolTest, PlainRatio128MatchesPlainLoops) {
  Rng rng(6);
  const CompressParams p{128, 64, false};
  std::vector<std::vector<float>> kv_rows, sc_rows;
  std::vector<const float*> kv, sc;
  for (int k = 0; k < 128; ++k) {
    kv_rows.push_back(rng.Vec(64));
    sc_rows.push_back(rng.Vec(64, -4, 4));
  }
  for (int k = 0; k < 128; ++k) {
    kv.push_back(kv_rows[static_cast<size_t>(k)].data());
    sc.push_back(sc_rows[static_cast<size_t>(k)].data());
  }
  std::vector<float> out(64), scratch(129 * 64);
  CompressPool(p, kv.data(), sc.data(), out.data(), scratch.data());
  const std::vector<double> want = PlainPool(p, kv, sc);
  for (int c = 0; c < 64; ++c)
    EXPECT_NEAR(out[static_cast<size_t>(c)], want[static_cast<size_t>(c)], 1e-5);
}

}  // namespace
}  // namespace nw::cpu
