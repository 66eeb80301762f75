// Whole-model properties of the CPU forward pass: causality, prefill/decode equivalence, layout
// and chunking invariance, dense vs top-k selection, profile hooks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"
#include "tests/cpu_backend/test_model.h"

namespace nw::cpu {
namespace {

using testing::AllLogits;
using testing::MakeSequence;
using testing::RandomTokens;
using testing::SmallWindow;
using testing::TinyA;

class ForwardTest : public ::testing::Test {
 protected:
  ModelConfig cfg_ = SmallWindow();
  ModelWeights w_ = RandomModelWeights(cfg_, 7);
};

TEST_F(ForwardTest, LogitsAreFiniteAndVary) {
  const std::vector<int32_t> tokens = RandomTokens(40, cfg_.vocab_size, 1);
  const std::vector<float> all = AllLogits(cfg_, w_, tokens, {});
  ASSERT_EQ(all.size(), tokens.size() * static_cast<size_t>(cfg_.vocab_size));
  for (float v : all) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(std::vector<float>(all.begin(), all.begin() + cfg_.vocab_size),
            std::vector<float>(all.end() - cfg_.vocab_size, all.end()));
}

TEST_F(ForwardTest, ChangingTokenJNeverChangesEarlierOutputs) {
  const int64_t n = 300, V = cfg_.vocab_size;
  const std::vector<int32_t> base = RandomTokens(n, V, 2);
  const std::vector<float> ref = AllLogits(cfg_, w_, base, {});
  for (int64_t j : {0, 5, 63, 64, 130, 257, 299}) {
    std::vector<int32_t> changed = base;
    changed[static_cast<size_t>(j)] =
        (changed[static_cast<size_t>(j)] + 17) % static_cast<int32_t>(V);
    const std::vector<float> got = AllLogits(cfg_, w_, changed, {});
    for (int64_t t = 0; t < j; ++t) {
      for (int64_t v = 0; v < V; ++v) {
        ASSERT_EQ(got[static_cast<size_t>(t * V + v)], ref[static_cast<size_t>(t * V + v)])
            << "changing token " << j << " changed position " << t;
      }
    }
    bool differs = false;
    for (int64_t v = 0; v < V; ++v) {
      differs =
          differs || got[static_cast<size_t>(j * V + v)] != ref[static_cast<size_t>(j * V + v)];
    }
    EXPECT_TRUE(differs) << "token " << j << " had no effect on its own logits";
  }
}

TEST_F(ForwardTest, PrefillThenDecodeEqualsOnePrefill) {
  const int64_t V = cfg_.vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(300, V, 3);
  const std::vector<float> ref = AllLogits(cfg_, w_, tokens, {});
  for (int64_t n : {1, 3, 4, 7, 128, 129, 250}) {
    SequenceOptions o;
    o.max_tokens = 300;
    Sequence seq = MakeSequence(cfg_, w_, o);
    std::vector<float> logits;
    ASSERT_TRUE(seq.Prefill(std::span(tokens).first(static_cast<size_t>(n)), &logits).ok());
    for (int64_t t = n; t < 300; ++t) {
      const float* want = ref.data() + (t - 1) * V;
      for (int64_t v = 0; v < V; ++v) {
        // Bitwise: every value depends only on its own inputs, not on how tokens are batched.
        ASSERT_EQ(logits[static_cast<size_t>(v)], want[v]) << "n " << n << " position " << t - 1;
      }
      ASSERT_TRUE(seq.Decode(tokens[static_cast<size_t>(t)], &logits).ok());
    }
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_EQ(logits[static_cast<size_t>(v)], ref[static_cast<size_t>(299 * V + v)]);
    }
  }
}

TEST_F(ForwardTest, PagedAndChunkedEqualContiguousBitwise) {
  const int64_t n = 600, V = cfg_.vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(n, V, 4);
  SequenceOptions contiguous;
  contiguous.max_tokens = n;
  Sequence ref_seq = MakeSequence(cfg_, w_, contiguous);
  std::vector<float> ref;
  ASSERT_TRUE(ref_seq.Prefill(tokens, &ref).ok());
  EXPECT_EQ(ref_seq.pages_in_use(), 0);
  for (KvLayout layout : {KvLayout::kContiguous, KvLayout::kPaged}) {
    for (int64_t chunk : {0, 1, 37, 64, 256}) {
      SequenceOptions o;
      o.layout = layout;
      o.prefill_chunk = chunk;
      o.max_tokens = n;
      Sequence seq = MakeSequence(cfg_, w_, o);
      std::vector<float> got;
      ASSERT_TRUE(seq.Prefill(tokens, &got).ok());
      EXPECT_EQ(got, ref) << "layout " << static_cast<int>(layout) << " chunk " << chunk;
      if (layout == KvLayout::kPaged) {
        EXPECT_GT(seq.pages_in_use(), 0);
      }
    }
  }
}

TEST_F(ForwardTest, PagedPoolReturnsPagesAndHoldsOnlyTheWindow) {
  SequenceOptions o;
  o.layout = KvLayout::kPaged;
  o.max_tokens = 1000;
  Sequence seq = MakeSequence(cfg_, w_, o);
  std::vector<float> logits;
  ASSERT_TRUE(seq.Prefill(RandomTokens(1000, cfg_.vocab_size, 5), &logits).ok());
  // Window rings (16 slots) take one page per layer; ratio-4 layer: 250 compressed + 250 index
  // keys = 4 + 4 pages; ratio-128 layer: 7 entries = 1 page.
  EXPECT_EQ(seq.pages_in_use(), 3 + 8 + 1);
}

TEST_F(ForwardTest, TopKCoveringEveryEntryEqualsDenseSelection) {
  const int64_t n = 400;
  const std::vector<int32_t> tokens = RandomTokens(n, cfg_.vocab_size, 6);
  SequenceOptions dense;
  dense.dense_compressed = true;
  const std::vector<float> want = AllLogits(cfg_, w_, tokens, dense);
  SequenceOptions wide;
  wide.index_topk = static_cast<int>(n / 4);  // >= every visible count
  EXPECT_EQ(AllLogits(cfg_, w_, tokens, wide), want);
  SequenceOptions narrow;  // the config's top-4 must differ once more than 4 entries are visible
  EXPECT_NE(AllLogits(cfg_, w_, tokens, narrow), want);
}

TEST_F(ForwardTest, ShortPromptSelectsEveryVisibleEntry) {
  const int64_t n = 19;  // 4 visible entries at the last token = topk
  SequenceOptions o;
  o.max_tokens = n;
  ProbeRequest probe;
  probe.keep_topk_sets = true;
  o.probe = probe;
  Sequence seq = MakeSequence(cfg_, w_, o);
  std::vector<float> logits;
  ASSERT_TRUE(seq.Prefill(RandomTokens(n, cfg_.vocab_size, 7), &logits).ok());
  ASSERT_EQ(seq.probes().size(), 1u);
  const IndexerProbe& p = seq.probes()[0];
  EXPECT_EQ(p.layer, 1);
  EXPECT_EQ(p.topk, 4);
  ASSERT_EQ(p.positions.size(), static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int32_t visible = static_cast<int32_t>((t + 1) / 4);
    EXPECT_EQ(p.positions[static_cast<size_t>(t)], t);
    EXPECT_EQ(p.num_visible[static_cast<size_t>(t)], visible);
    std::vector<int32_t> set(p.topk_sets.begin() + t * 4, p.topk_sets.begin() + (t + 1) * 4);
    std::sort(set.begin(), set.begin() + visible);
    for (int32_t j = 0; j < 4; ++j) EXPECT_EQ(set[static_cast<size_t>(j)], j < visible ? j : -1);
  }
}

TEST_F(ForwardTest, ProbesAreConsistentWithSelection) {
  const int64_t n = 300;
  SequenceOptions o;
  o.max_tokens = n + 5;
  ProbeRequest probe;
  probe.needle_begin = 101;
  probe.needle_end = 110;
  probe.query_begin = 280;
  probe.keep_topk_sets = true;
  o.probe = probe;
  Sequence seq = MakeSequence(cfg_, w_, o);
  std::vector<float> logits;
  const std::vector<int32_t> tokens = RandomTokens(n + 5, cfg_.vocab_size, 8);
  ASSERT_TRUE(seq.Prefill(std::span(tokens).first(n), &logits).ok());
  for (int64_t t = n; t < n + 5; ++t)
    ASSERT_TRUE(seq.Decode(tokens[static_cast<size_t>(t)], &logits).ok());
  const IndexerProbe& p = seq.probes().at(0);
  ASSERT_EQ(p.positions.size(), 25u);
  for (size_t r = 0; r < p.positions.size(); ++r) {
    const int64_t t = 280 + static_cast<int64_t>(r);
    EXPECT_EQ(p.positions[r], t);
    EXPECT_EQ(p.num_visible[r], (t + 1) / 4);
    // Needle tokens 101..109 are covered by entries 25..28 (entry i pools 4(i-1)..4i+3).
    const int32_t rank = p.needle_rank[r];
    ASSERT_GE(rank, 0);
    EXPECT_EQ(p.in_topk[r], rank < 4 ? 1 : 0);
    ASSERT_FALSE(std::isnan(p.kth_score[r]));
    // The best entry left out ranks right after the k-th selected one (visible > 4 here).
    ASSERT_EQ(p.next_score.size(), p.positions.size());
    ASSERT_FALSE(std::isnan(p.next_score[r]));
    EXPECT_LE(p.next_score[r], p.kth_score[r]);
    if (rank == 4) {
      EXPECT_EQ(p.next_score[r], p.needle_score[r]);
    }
    if (rank < 4) {
      EXPECT_GE(p.needle_score[r], p.kth_score[r]);
    } else {
      EXPECT_LE(p.needle_score[r], p.kth_score[r]);
    }
    bool any = false;
    for (int j = 0; j < 4; ++j) {
      const int32_t id = p.topk_sets[r * 4 + static_cast<size_t>(j)];
      ASSERT_GE(id, 0);
      ASSERT_LT(id, p.num_visible[r]);
      any = any || (id >= 25 && id <= 28);
    }
    EXPECT_EQ(any, p.in_topk[r] == 1);
  }
}

TEST_F(ForwardTest, ProbeRankIsMinusOneBeforeTheNeedleIsVisible) {
  SequenceOptions o;
  o.max_tokens = 40;
  ProbeRequest probe;
  probe.needle_begin = 30;
  probe.needle_end = 34;
  o.probe = probe;
  Sequence seq = MakeSequence(cfg_, w_, o);
  std::vector<float> logits;
  ASSERT_TRUE(seq.Prefill(RandomTokens(40, cfg_.vocab_size, 9), &logits).ok());
  const IndexerProbe& p = seq.probes().at(0);
  for (size_t t = 0; t < 40; ++t) {
    // Entries 7..9 cover tokens 30..33; entry 7 (tokens 24..31) is visible from t = 31.
    EXPECT_EQ(p.needle_rank[t] >= 0, t >= 31) << t;
  }
}

TEST_F(ForwardTest, ProfileHooksChangeResultsOnlyWhenEnabled) {
  const std::vector<int32_t> tokens = RandomTokens(200, cfg_.vocab_size, 10);
  SequenceOptions fp32;
  const std::vector<float> ref = AllLogits(cfg_, w_, tokens, fp32);
  SequenceOptions named = fp32;
  named.precision.name = "anything";  // the name alone changes nothing
  EXPECT_EQ(AllLogits(cfg_, w_, tokens, named), ref);
  auto with = [&](auto set) {
    SequenceOptions o;
    set(o.precision);
    return AllLogits(cfg_, w_, tokens, o);
  };
  EXPECT_NE(with([](PrecisionProfile& p) { p.activations = NumFormat::kBf16; }), ref);
  EXPECT_NE(with([](PrecisionProfile& p) { p.kv = NumFormat::kBf16; }), ref);
  EXPECT_NE(with([](PrecisionProfile& p) { p.kv = NumFormat::kFp8; }), ref);
  // The index formats act only through the indexer's scores (the logits change only when a
  // selection flips), so compare the scores the probes report, on a model whose indexer is in
  // layer 0 (its scores depend on nothing but the embeddings and the index formats).
  ModelConfig first = cfg_;
  first.compress_ratios = {4, 128, 0, 0};
  const ModelWeights wf = RandomModelWeights(first, 12);
  auto scores = [&](auto set) {
    SequenceOptions o;
    o.max_tokens = static_cast<int64_t>(tokens.size());
    o.probe = ProbeRequest{.needle_begin = 40, .needle_end = 60};
    set(o.precision);
    Sequence seq = MakeSequence(first, wf, o);
    std::vector<float> logits;
    EXPECT_TRUE(seq.Prefill(tokens, &logits).ok());
    return seq.probes().at(0).needle_score;
  };
  const std::vector<float> ref_scores = scores([](PrecisionProfile&) {});
  ASSERT_EQ(ref_scores.size(), tokens.size());
  EXPECT_TRUE(std::isnan(ref_scores[0]));  // no needle entry visible yet
  EXPECT_FALSE(std::isnan(ref_scores.back()));
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i] && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
    }
    return a.size() == b.size();
  };
  EXPECT_TRUE(same(scores([](PrecisionProfile& p) { p.kv = NumFormat::kFp8; }), ref_scores))
      << "the kv format must not touch the indexer's scores";
  for (NumFormat f : {NumFormat::kBf16, NumFormat::kFp8, NumFormat::kMxfp4, NumFormat::kNvfp4}) {
    EXPECT_FALSE(same(scores([f](PrecisionProfile& p) { p.index_q = f; }), ref_scores))
        << NumFormatName(f);
    EXPECT_FALSE(same(scores([f](PrecisionProfile& p) { p.index_k = f; }), ref_scores))
        << NumFormatName(f);
  }
}

TEST_F(ForwardTest, IndexHooksDoNothingWithoutAnIndexerLayer) {
  ModelConfig cfg = cfg_;
  cfg.compress_ratios = {0, 128, 128, 0};
  const ModelWeights w = RandomModelWeights(cfg, 11);
  const std::vector<int32_t> tokens = RandomTokens(150, cfg.vocab_size, 11);
  const std::vector<float> ref = AllLogits(cfg, w, tokens, {});
  SequenceOptions o;
  o.precision.index_q = NumFormat::kMxfp4;
  o.precision.index_k = NumFormat::kFp8;
  EXPECT_EQ(AllLogits(cfg, w, tokens, o), ref);
}

TEST_F(ForwardTest, RejectsBadInput) {
  SequenceOptions o;
  o.max_tokens = 4;
  Sequence seq = MakeSequence(cfg_, w_, o);
  std::vector<float> logits;
  EXPECT_FALSE(seq.Prefill({}, &logits).ok());
  const std::vector<int32_t> bad = {0, cfg_.vocab_size};
  EXPECT_EQ(seq.Prefill(bad, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(seq.position(), 0);
  const std::vector<int32_t> too_long = {1, 2, 3, 4, 5};
  EXPECT_EQ(seq.Prefill(too_long, &logits).code(), StatusCode::kOutOfRange);
  ModelWeights broken = w_;
  broken.layers[1].attn.indexer.reset();
  auto s = Sequence::Create(cfg_, broken, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("layers.1.attn.indexer"), std::string::npos);
  broken = w_;
  broken.layers[2].attn.wo_a.shape = {1, 2};
  s = Sequence::Create(cfg_, broken, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("layers.2.attn.wo_a.weight"), std::string::npos);
}

}  // namespace
}  // namespace nw::cpu
