// Prefill/decode disaggregation on the CPU: prefill on one Sequence, ship the decode state as a
// transfer buffer, decode on a second Sequence; bitwise the same greedy answers and probes as
// decoding in the first. Hostile buffers are rejected and leave the receiver untouched.
#include "engine/parallel/pd_transfer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/cpu/random_weights.h"
#include "tests/parallel/test_util.h"

namespace nw::parallel {
namespace {

using testing::GreedyDecode;
using testing::GreedyRun;
using testing::LoadTiny;
using testing::Tokens;

constexpr int64_t kCapacity = 200;

cpu::SequenceOptions Options(KvLayout layout, int64_t prompt_len) {
  cpu::SequenceOptions o;
  o.layout = layout;
  o.prefill_chunk = layout == KvLayout::kPaged ? 24 : 0;
  o.max_tokens = kCapacity;
  ProbeRequest probe;
  probe.needle_begin = 30;
  probe.needle_end = 38;
  probe.query_begin = prompt_len;  // decode steps only: both sides record the same rows
  probe.keep_topk_sets = true;
  o.probe = probe;
  return o;
}

cpu::Sequence Make(const ModelConfig& cfg, const ModelWeights& w, const cpu::SequenceOptions& o) {
  auto s = cpu::Sequence::Create(cfg, w, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

void ExpectSameProbes(const std::vector<IndexerProbe>& a, const std::vector<IndexerProbe>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t l = 0; l < a.size(); ++l) {
    ASSERT_FALSE(a[l].positions.empty());
    EXPECT_EQ(a[l].positions, b[l].positions);
    EXPECT_EQ(a[l].topk_sets, b[l].topk_sets);
    EXPECT_EQ(a[l].needle_rank, b[l].needle_rank);
    EXPECT_EQ(a[l].in_topk, b[l].in_topk);
    EXPECT_EQ(a[l].num_visible, b[l].num_visible);
    EXPECT_EQ(0, std::memcmp(a[l].needle_score.data(), b[l].needle_score.data(),
                             a[l].needle_score.size() * sizeof(float)));
  }
}

struct PdCase {
  std::string config;
  KvLayout prefill_layout;
  KvLayout decode_layout;
  int64_t prompt_len;
};

class PdEquivalenceTest : public ::testing::TestWithParam<PdCase> {};

TEST_P(PdEquivalenceTest, DecodeOnSecondInstanceIsBitwiseTheSame) {
  const PdCase c = GetParam();
  const ModelConfig cfg = LoadTiny(c.config, 16, 4);
  const ModelWeights w = cpu::RandomModelWeights(cfg, 21);
  const std::vector<int32_t> prompt = Tokens(c.prompt_len, cfg.vocab_size, 3);
  const int steps = 20;

  // Same instance: prefill, then decode there.
  cpu::Sequence local = Make(cfg, w, Options(c.prefill_layout, c.prompt_len));
  std::vector<float> logits;
  ASSERT_TRUE(local.Prefill(prompt, &logits).ok());
  const std::vector<uint8_t> buffer = ExportTransfer(cfg, local);
  const GreedyRun ref = GreedyDecode(local, logits, steps);

  // Disaggregated: a second instance imports the buffer and decodes from the prefill logits.
  cpu::Sequence remote = Make(cfg, w, Options(c.decode_layout, c.prompt_len));
  const Status st = ImportTransfer(cfg, buffer, &remote);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(remote.position(), c.prompt_len);
  const GreedyRun pd = GreedyDecode(remote, logits, steps);

  EXPECT_EQ(pd.tokens, ref.tokens);
  ASSERT_EQ(pd.logits.size(), ref.logits.size());
  for (size_t i = 0; i < ref.logits.size(); ++i) {
    ASSERT_EQ(pd.logits[i].size(), ref.logits[i].size());
    EXPECT_EQ(0, std::memcmp(pd.logits[i].data(), ref.logits[i].data(),
                             ref.logits[i].size() * sizeof(float)))
        << "step " << i;
  }
  ExpectSameProbes(remote.probes(), local.probes());
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PdEquivalenceTest,
    ::testing::Values(PdCase{"tiny-a.json", KvLayout::kContiguous, KvLayout::kContiguous, 150},
                      PdCase{"tiny-a.json", KvLayout::kPaged, KvLayout::kPaged, 150},
                      PdCase{"tiny-a.json", KvLayout::kContiguous, KvLayout::kPaged, 131},
                      PdCase{"tiny-b.json", KvLayout::kPaged, KvLayout::kContiguous, 139},
                      PdCase{"tiny-b.json", KvLayout::kContiguous, KvLayout::kContiguous, 7}),
    [](const ::testing::TestParamInfo<PdCase>& i) {
      auto name = [](KvLayout l) { return l == KvLayout::kPaged ? "paged" : "contiguous"; };
      std::string n = i.param.config.substr(0, 6) + "_" + name(i.param.prefill_layout) + "_to_" +
                      name(i.param.decode_layout) + "_" + std::to_string(i.param.prompt_len);
      for (char& ch : n) {
        if (ch == '-') ch = '_';
      }
      return n;
    });

// Without the transferred state the second instance decodes differently (the test can fail).
TEST(PdTransferTest, StateMatters) {
  const ModelConfig cfg = LoadTiny("tiny-a.json", 16, 4);
  const ModelWeights w = cpu::RandomModelWeights(cfg, 21);
  const std::vector<int32_t> prompt = Tokens(150, cfg.vocab_size, 3);
  cpu::Sequence local = Make(cfg, w, Options(KvLayout::kContiguous, 150));
  std::vector<float> logits;
  ASSERT_TRUE(local.Prefill(prompt, &logits).ok());
  cpu::SequenceState st = local.ExportState();
  st.layers[1].index_keys[0] += 1.0f;  // one perturbed index key value
  st.layers[2].compressed[5] += 1.0f;
  cpu::Sequence remote = Make(cfg, w, Options(KvLayout::kContiguous, 150));
  ASSERT_TRUE(remote.ImportState(st).ok());
  std::vector<float> a, b;
  ASSERT_TRUE(local.Decode(3, &a).ok());
  ASSERT_TRUE(remote.Decode(3, &b).ok());
  EXPECT_NE(a, b);
}

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// Rewrites the trailing checksum, so a test reaches the checks behind it.
void Reseal(std::vector<uint8_t>& b) {
  const uint64_t h = Fnv1a(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i)
    b[b.size() - 8 + static_cast<size_t>(i)] = static_cast<uint8_t>(h >> (8 * i));
}

class HostileBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::Sequence s = Make(cfg_, w_, Options(KvLayout::kContiguous, 150));
    std::vector<float> logits;
    ASSERT_TRUE(s.Prefill(Tokens(150, cfg_.vocab_size, 3), &logits).ok());
    good_ = ExportTransfer(cfg_, s);
  }
  // Import into a fresh receiver must fail and leave it at position 0, still usable.
  void ExpectRejected(const std::vector<uint8_t>& bytes, const std::string& why) {
    cpu::Sequence r = Make(cfg_, w_, Options(KvLayout::kPaged, 150));
    const Status st = ImportTransfer(cfg_, bytes, &r);
    EXPECT_FALSE(st.ok()) << why;
    EXPECT_EQ(r.position(), 0) << why;
    EXPECT_EQ(r.pages_in_use(), 0) << why;
    std::vector<float> logits;
    EXPECT_TRUE(r.Decode(1, &logits).ok()) << why;
  }
  ModelConfig cfg_ = LoadTiny("tiny-a.json", 16, 4);
  ModelWeights w_ = cpu::RandomModelWeights(cfg_, 21);
  std::vector<uint8_t> good_;
};

TEST_F(HostileBufferTest, GoodBufferImports) {
  cpu::Sequence r = Make(cfg_, w_, Options(KvLayout::kPaged, 150));
  EXPECT_TRUE(ImportTransfer(cfg_, good_, &r).ok());
  EXPECT_EQ(r.position(), 150);
  // A second import into a used receiver is refused.
  EXPECT_FALSE(ImportTransfer(cfg_, good_, &r).ok());
}

TEST_F(HostileBufferTest, TruncatedAndEmptyRejected) {
  ExpectRejected({}, "empty");
  for (size_t n : {size_t{3}, size_t{11}, size_t{40}, good_.size() / 2, good_.size() - 1}) {
    ExpectRejected(std::vector<uint8_t>(good_.begin(), good_.begin() + static_cast<long>(n)),
                   "truncated to " + std::to_string(n));
  }
  std::vector<uint8_t> t(good_.begin(), good_.end() - 12);  // truncated, then resealed
  t.resize(t.size() + 8);
  Reseal(t);
  ExpectRejected(t, "truncated and resealed");
}

TEST_F(HostileBufferTest, CorruptBytesRejected) {
  for (size_t at : {size_t{0}, size_t{5}, size_t{30}, good_.size() / 2, good_.size() - 3}) {
    std::vector<uint8_t> b = good_;
    b[at] ^= 0x40;
    ExpectRejected(b, "flipped byte " + std::to_string(at));
  }
}

TEST_F(HostileBufferTest, ResealedLiesRejected) {
  std::vector<uint8_t> b = good_;
  b[4] = 2;  // version 2
  Reseal(b);
  ExpectRejected(b, "version");
  b = good_;
  b[12] ^= 1;  // head_dim
  Reseal(b);
  ExpectRejected(b, "head_dim");
  b = good_;
  b[24] = 0;  // position 150 -> something else: every array size disagrees
  b[25] = 1;
  Reseal(b);
  ExpectRejected(b, "position");
  b = good_;
  b[24] = 152;  // within capacity, but 38 ratio-4 entries would be due, 37 are sent
  Reseal(b);
  ExpectRejected(b, "position 152");
  b = good_;
  for (int i = 0; i < 8; ++i) b[24 + static_cast<size_t>(i)] = 0xff;  // position -1
  Reseal(b);
  ExpectRejected(b, "negative position");
  b = good_;
  // Layer 0's window count (offset 32 + 4) claims 2^60 values.
  b[36 + 7] = 0x10;
  Reseal(b);
  ExpectRejected(b, "huge count");
  b = good_;
  b[32] = 128;  // layer 0 ratio 0 -> 128
  Reseal(b);
  ExpectRejected(b, "ratio");
  b = good_;
  b.insert(b.end() - 8, {0, 0, 0, 0});  // trailing bytes
  Reseal(b);
  ExpectRejected(b, "trailing");
}

TEST_F(HostileBufferTest, OtherModelRejected) {
  const ModelConfig other = LoadTiny("tiny-b.json", 16, 4);
  const ModelWeights ow = cpu::RandomModelWeights(other, 21);
  cpu::Sequence r = Make(other, ow, Options(KvLayout::kContiguous, 150));
  EXPECT_FALSE(ImportTransfer(other, good_, &r).ok());
  EXPECT_EQ(r.position(), 0);
  // Receiver capacity below the transferred position.
  cpu::SequenceOptions small = Options(KvLayout::kContiguous, 150);
  small.max_tokens = 100;
  cpu::Sequence tiny = Make(cfg_, w_, small);
  EXPECT_FALSE(ImportTransfer(cfg_, good_, &tiny).ok());
  EXPECT_EQ(tiny.position(), 0);
}

}  // namespace
}  // namespace nw::parallel
