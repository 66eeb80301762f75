// Known-bug replay (engine/fault.h): the catalog, which backends replay what, and for every fault
// a deterministic check on a random small model (config A with a 16-token window and top-4, so
// short prompts need the indexer) that the fault changes what it claims to change and nothing
// before it. `none` is the engine of today: the golden tests (golden_test, hf_reference_test,
// deepseek_reference_test) run with it.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/backend_catalog.h"
#include "engine/cpu/random_weights.h"
#include "engine/engine.h"
#include "engine/fault.h"
#include "engine/generate.h"
#include "tests/cpu_backend/test_model.h"

namespace nw {
namespace {

using cpu::testing::RandomTokens;
using cpu::testing::SmallWindow;

// A run through one backend: the last prompt token's logits, then one row per decode step, and
// the probes (prompt positions, then decode positions) with their top-k sets.
struct FaultRun {
  std::vector<std::vector<float>> logits;
  std::vector<IndexerProbe> probes;
};

class FaultTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> Make(const std::string& name, const ModelConfig& cfg) {
    auto w = std::make_shared<const ModelWeights>(cpu::RandomModelWeights(cfg, 7));
    auto b = CreateBackend(name, cfg, std::move(w));
    EXPECT_TRUE(b.ok()) << name << ": " << b.status().ToString();
    return b.ok() ? *std::move(b) : nullptr;
  }

  // Prefill `prompt` (in one call, or token by token when `one_by_one`), then `steps` greedy
  // decode steps.
  FaultRun Go(Backend& b, Fault fault, const std::vector<int32_t>& prompt, int steps,
              bool one_by_one = false) {
    SequenceSpec spec;
    spec.max_tokens = static_cast<int64_t>(prompt.size()) + steps + 1;
    spec.fault = fault;
    ProbeRequest pr;
    pr.keep_topk_sets = true;
    spec.probe = pr;
    FaultRun run;
    auto seq = b.NewSequence(spec);
    EXPECT_TRUE(seq.ok()) << seq.status().ToString();
    if (!seq.ok()) return run;
    std::vector<float> logits;
    if (one_by_one) {
      for (int32_t t : prompt) {
        EXPECT_TRUE((*seq)->Prefill(std::span<const int32_t>(&t, 1), &logits).ok());
      }
    } else {
      EXPECT_TRUE((*seq)->Prefill(prompt, &logits).ok());
    }
    run.logits.push_back(logits);
    for (int i = 0; i < steps; ++i) {
      const int32_t tok = Argmax(logits.data(), static_cast<int64_t>(logits.size()));
      const Status s = (*seq)->Decode(tok, &logits);
      EXPECT_TRUE(s.ok()) << s.ToString();
      run.logits.push_back(logits);
    }
    run.probes = (*seq)->probes();
    return run;
  }

  ModelConfig cfg_ = SmallWindow();  // ratios [0, 4, 128, 0], window 16, top-4
};

// The top-k sets of probe layer `l` at the probe rows [begin, end).
std::vector<int32_t> Sets(const FaultRun& r, size_t l, size_t begin, size_t end) {
  const IndexerProbe& p = r.probes.at(l);
  const size_t k = static_cast<size_t>(p.topk);
  return std::vector<int32_t>(p.topk_sets.begin() + static_cast<std::ptrdiff_t>(begin * k),
                              p.topk_sets.begin() + static_cast<std::ptrdiff_t>(end * k));
}

TEST(FaultCatalogTest, NamesParseAndEveryFaultIsDocumented) {
  std::ifstream in(std::string(NW_SOURCE_DIR) + "/docs/faults.md");
  ASSERT_TRUE(in) << "docs/faults.md is missing";
  std::stringstream doc;
  doc << in.rdbuf();
  ASSERT_EQ(FaultCatalog().front().fault, Fault::kNone);
  for (const FaultInfo& f : FaultCatalog()) {
    auto parsed = ParseFault(f.name);
    ASSERT_TRUE(parsed.ok()) << f.name;
    EXPECT_EQ(*parsed, f.fault);
    EXPECT_EQ(FaultName(f.fault), f.name);
    if (f.fault == Fault::kNone) continue;
    EXPECT_FALSE(f.source.empty()) << f.name;
    EXPECT_NE(doc.str().find("`" + std::string(f.name) + "`"), std::string::npos)
        << f.name << " is not in docs/faults.md";
  }
  auto bad = ParseFault("pd-handoff");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pd-handoff-loses-state"), std::string::npos);
}

TEST(FaultCatalogTest, EveryEngineBackendReplaysTheForwardFaultsPdBackendsTheHandoffOnes) {
  for (const BackendInfo& b : BackendCatalog()) {
    EXPECT_TRUE(CheckBackendFault(b, Fault::kNone).ok()) << b.name;
    for (const FaultInfo& f : FaultCatalog()) {
      if (f.fault == Fault::kNone) continue;
      const bool handoff =
          f.fault == Fault::kPdHandoffLosesState || f.fault == Fault::kCompressorStateNotRestored;
      const Status s = CheckBackendFault(b, f.fault);
      EXPECT_EQ(s.ok(), !handoff || b.disaggregated) << b.name << " " << f.name;
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kUnsupported) << b.name;
        EXPECT_NE(s.message().find(std::string(b.name)), std::string::npos) << s.message();
        EXPECT_NE(s.message().find("replayed by: cpu-pd, cuda-pd"), std::string::npos)
            << s.message();
      }
    }
  }
}

TEST_F(FaultTest, BackendsRefuseFaultsTheyDoNotReplay) {
  auto cpu = Make("cpu", cfg_);
  ASSERT_NE(cpu, nullptr);
  GenerateRequest req;
  req.prompt = RandomTokens(20, cfg_.vocab_size, 1);
  req.max_new_tokens = 2;
  req.fault = Fault::kPdHandoffLosesState;
  auto r = Generate(*cpu, req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("pd-handoff-loses-state"), std::string::npos);
  SequenceSpec spec;
  spec.max_tokens = 8;
  spec.fault = Fault::kCompressorStateNotRestored;
  EXPECT_FALSE(cpu->NewSequence(spec).ok());
}

// None of the faults leaks into another request, and a decode batch mixing a faulted and a
// clean sequence gives each what it gives alone.
TEST_F(FaultTest, FaultsStayInTheirRequestAndBatchesMix) {
  ModelConfig cfg = cfg_;
  cfg.swiglu_clamp_shared_expert = true;
  cfg.swiglu_limit = 0.05;  // so the clamp bites on random weights
  auto b = Make("cpu", cfg);
  ASSERT_NE(b, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(40, cfg.vocab_size, 3);
  const FaultRun clean = Go(*b, Fault::kNone, prompt, 3);
  const FaultRun faulty = Go(*b, Fault::kSharedExpertNoClamp, prompt, 3);
  EXPECT_TRUE(clean.logits != faulty.logits);
  EXPECT_TRUE(Go(*b, Fault::kNone, prompt, 3).logits == clean.logits);

  SequenceSpec spec;
  spec.max_tokens = 64;
  auto a = b->NewSequence(spec);
  spec.fault = Fault::kSharedExpertNoClamp;
  auto f = b->NewSequence(spec);
  ASSERT_TRUE(a.ok() && f.ok());
  std::vector<float> la, lf;
  ASSERT_TRUE((*a)->Prefill(prompt, &la).ok());
  ASSERT_TRUE((*f)->Prefill(prompt, &lf).ok());
  BackendSequence* seqs[] = {a->get(), f->get()};
  const int32_t toks[] = {Argmax(la.data(), static_cast<int64_t>(la.size())),
                          Argmax(lf.data(), static_cast<int64_t>(lf.size()))};
  std::vector<float> batch;
  ASSERT_TRUE(b->DecodeBatch(seqs, toks, &batch).ok());
  const size_t V = static_cast<size_t>(cfg.vocab_size);
  EXPECT_EQ(std::vector<float>(batch.begin(), batch.begin() + V), clean.logits[1]);
  EXPECT_EQ(std::vector<float>(batch.begin() + V, batch.end()), faulty.logits[1]);
}

// pd-handoff-loses-state: the prefill instance is untouched (same prompt logits and top-k sets);
// the decode instance's indexer selects differently from the first decode step on.
TEST_F(FaultTest, PdHandoffLosesStateChangesDecodeSelectionsOnly) {
  auto b = Make("cpu-pd", cfg_);
  ASSERT_NE(b, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(64, cfg_.vocab_size, 11);
  const FaultRun clean = Go(*b, Fault::kNone, prompt, 4);
  const FaultRun faulty = Go(*b, Fault::kPdHandoffLosesState, prompt, 4);
  ASSERT_EQ(clean.probes.size(), 1u);
  EXPECT_TRUE(clean.logits[0] == faulty.logits[0]);
  EXPECT_EQ(Sets(clean, 0, 0, 64), Sets(faulty, 0, 0, 64));
  EXPECT_NE(Sets(clean, 0, 64, 65), Sets(faulty, 0, 64, 65));
  EXPECT_TRUE(clean.logits[1] != faulty.logits[1]);
}

// compressor-state-not-restored: a 64-token prompt ends on a block boundary, so the decode steps
// at positions 64..66 complete no entry and agree; position 67 completes entry 16, which pools
// positions 60..63 from the (lost) rolling state, and the logits part there.
TEST_F(FaultTest, CompressorStateNotRestoredPartsAtTheFirstCompletedBlock) {
  ModelConfig cfg = cfg_;
  cfg.index_topk = 1024;  // every visible entry attended: the new entry always counts
  auto b = Make("cpu-pd", cfg);
  ASSERT_NE(b, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(64, cfg.vocab_size, 12);
  const FaultRun clean = Go(*b, Fault::kNone, prompt, 5);
  const FaultRun faulty = Go(*b, Fault::kCompressorStateNotRestored, prompt, 5);
  for (size_t i = 0; i <= 3; ++i) EXPECT_TRUE(clean.logits[i] == faulty.logits[i]) << "row " << i;
  EXPECT_TRUE(clean.logits[4] != faulty.logits[4]);
}

// indexer-rope-layout: the indexer's scores move (the recorded k-th scores differ) from the
// prompt on; the faulted backend is every CPU backend.
TEST_F(FaultTest, IndexerRopeLayoutChangesIndexerScores) {
  for (const char* name : {"cpu", "cpu-paged", "cpu-pd"}) {
    auto b = Make(name, cfg_);
    ASSERT_NE(b, nullptr);
    const std::vector<int32_t> prompt = RandomTokens(48, cfg_.vocab_size, 13);
    const FaultRun clean = Go(*b, Fault::kNone, prompt, 1);
    const FaultRun faulty = Go(*b, Fault::kIndexerRopeLayout, prompt, 1);
    int differ = 0;
    for (size_t t = 8; t < 48; ++t) {
      differ += clean.probes[0].kth_score[t] != faulty.probes[0].kth_score[t];
    }
    EXPECT_GT(differ, 30) << name;
  }
}

// ragged-key-range: in a one-pass prefill every prompt position sees the chunk end's entries;
// fed token by token (one-token chunks) the fault changes nothing.
TEST_F(FaultTest, RaggedKeyRangeHitsMultiTokenChunksOnly) {
  auto b = Make("cpu", cfg_);
  ASSERT_NE(b, nullptr);
  const int64_t L = 50;
  const std::vector<int32_t> prompt = RandomTokens(L, cfg_.vocab_size, 14);
  const FaultRun clean = Go(*b, Fault::kNone, prompt, 2);
  const FaultRun faulty = Go(*b, Fault::kRaggedKeyRange, prompt, 2);
  for (int64_t t = 0; t < L; ++t) {
    const size_t i = static_cast<size_t>(t);
    EXPECT_EQ(clean.probes[0].num_visible[i], (t + 1) / 4);
    EXPECT_EQ(faulty.probes[0].num_visible[i], L / 4);
  }
  EXPECT_TRUE(clean.logits[0] != faulty.logits[0]);
  const FaultRun clean1 = Go(*b, Fault::kNone, prompt, 2, true);
  const FaultRun faulty1 = Go(*b, Fault::kRaggedKeyRange, prompt, 2, true);
  EXPECT_TRUE(clean1.logits == faulty1.logits);
}

// ragged-key-offset: in a multi-chunk prefill no query of a later chunk selects an entry of an
// earlier chunk (clean: some do); a prompt within one chunk, and decode, are unchanged. cpu-paged
// prefills in its own 256-token chunks, cpu in 1,024-token chunks under the fault.
TEST_F(FaultTest, RaggedKeyOffsetHidesEarlierChunksFromPrefill) {
  for (const auto& [name, chunk] : {std::pair<const char*, int64_t>{"cpu", 1024},
                                    std::pair<const char*, int64_t>{"cpu-paged", 256}}) {
    auto b = Make(name, cfg_);
    ASSERT_NE(b, nullptr);
    const int64_t L = chunk + 40;
    const std::vector<int32_t> prompt = RandomTokens(L, cfg_.vocab_size, 16);
    const FaultRun clean = Go(*b, Fault::kNone, prompt, 2);
    const FaultRun faulty = Go(*b, Fault::kRaggedKeyOffset, prompt, 2);
    const size_t k = static_cast<size_t>(faulty.probes[0].topk);
    int clean_early = 0, faulty_early = 0;
    for (int64_t t = chunk; t < L; ++t) {  // the second chunk's prompt positions
      const std::vector<int32_t> cs = Sets(clean, 0, static_cast<size_t>(t), t + 1);
      const std::vector<int32_t> fs = Sets(faulty, 0, static_cast<size_t>(t), t + 1);
      for (size_t j = 0; j < k; ++j) {
        clean_early += cs[j] >= 0 && cs[j] < chunk / 4;
        faulty_early += fs[j] >= 0 && fs[j] < chunk / 4;
      }
    }
    EXPECT_GT(clean_early, 0) << name;
    EXPECT_EQ(faulty_early, 0) << name;
    EXPECT_TRUE(Sets(clean, 0, 0, static_cast<size_t>(chunk)) ==
                Sets(faulty, 0, 0, static_cast<size_t>(chunk)))
        << name << ": the first chunk is unchanged";
    EXPECT_TRUE(clean.logits[0] != faulty.logits[0]) << name;
    // One chunk only: bit-identical, decode steps included.
    const std::vector<int32_t> short_prompt = RandomTokens(chunk - 10, cfg_.vocab_size, 17);
    EXPECT_TRUE(Go(*b, Fault::kNone, short_prompt, 3).logits ==
                Go(*b, Fault::kRaggedKeyOffset, short_prompt, 3).logits)
        << name;
  }
}

// partial-block-mod4: prompt logits never change; decode outputs change iff prompt_len % 4 == 3.
TEST_F(FaultTest, PartialBlockMod4ChangesOutputsOnlyAtResidue3) {
  ModelConfig cfg = cfg_;
  cfg.index_topk = 1024;  // every visible entry attended: the stale entry always counts
  for (const char* name : {"cpu", "cpu-paged", "cpu-pd"}) {
    auto b = Make(name, cfg);
    ASSERT_NE(b, nullptr);
    for (int64_t L : {60, 61, 62, 63, 64, 67}) {
      const std::vector<int32_t> prompt = RandomTokens(L, cfg.vocab_size, 15);
      const FaultRun clean = Go(*b, Fault::kNone, prompt, 3);
      const FaultRun faulty = Go(*b, Fault::kPartialBlockMod4, prompt, 3);
      EXPECT_TRUE(clean.logits[0] == faulty.logits[0]) << name << " L=" << L;
      if (L % 4 == 3) {
        EXPECT_TRUE(clean.logits != faulty.logits) << name << " L=" << L;
      } else {
        EXPECT_TRUE(clean.logits == faulty.logits) << name << " L=" << L;
      }
    }
  }
}

// compressed-kv-no-rope: the first compressed layer (ratio 4) selects with its indexer before it
// attends, and its index keys keep their RoPE, so its top-k sets over the prompt are unchanged;
// the attention (and the logits) change.
TEST_F(FaultTest, CompressedKvNoRopeLeavesTheFirstIndexerAlone) {
  auto b = Make("cpu", cfg_);
  ASSERT_NE(b, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(48, cfg_.vocab_size, 16);
  const FaultRun clean = Go(*b, Fault::kNone, prompt, 1);
  const FaultRun faulty = Go(*b, Fault::kCompressedKvNoRope, prompt, 1);
  EXPECT_EQ(Sets(clean, 0, 0, 48), Sets(faulty, 0, 0, 48));
  EXPECT_TRUE(clean.logits[0] != faulty.logits[0]);
}

// compress-rope-base: equal to the engine on a config whose compressed layers' table is the plain
// one (compress_rope_theta = rope_theta, no YaRN); different on the real config.
TEST_F(FaultTest, CompressRopeBaseEqualsThePlainTable) {
  const std::vector<int32_t> prompt = RandomTokens(40, cfg_.vocab_size, 17);
  auto real = Make("cpu", cfg_);
  ASSERT_NE(real, nullptr);
  EXPECT_TRUE(Go(*real, Fault::kNone, prompt, 2).logits !=
              Go(*real, Fault::kCompressRopeBase, prompt, 2).logits);
  ModelConfig plain = cfg_;
  plain.compress_rope_theta = plain.rope_theta;
  plain.original_seq_len = 0;
  auto same = Make("cpu", plain);
  ASSERT_NE(same, nullptr);
  EXPECT_TRUE(Go(*same, Fault::kNone, prompt, 2).logits ==
              Go(*same, Fault::kCompressRopeBase, prompt, 2).logits);
}

// shared-expert-no-clamp: bit-identical to swiglu_clamp_shared_expert = false, and different from
// the clamped engine (a small swiglu_limit makes the clamp bite on random weights).
TEST_F(FaultTest, SharedExpertNoClampEqualsTheUnclampedConfig) {
  ModelConfig clamped = cfg_;
  clamped.swiglu_clamp_shared_expert = true;
  clamped.swiglu_limit = 0.05;
  ModelConfig unclamped = clamped;
  unclamped.swiglu_clamp_shared_expert = false;
  const std::vector<int32_t> prompt = RandomTokens(40, cfg_.vocab_size, 18);
  for (const char* name : {"cpu", "cpu-paged", "cpu-pd"}) {
    auto c = Make(name, clamped);
    auto u = Make(name, unclamped);
    ASSERT_TRUE(c != nullptr && u != nullptr);
    const FaultRun faulty = Go(*c, Fault::kSharedExpertNoClamp, prompt, 3);
    EXPECT_TRUE(faulty.logits == Go(*u, Fault::kNone, prompt, 3).logits) << name;
    EXPECT_TRUE(faulty.logits != Go(*c, Fault::kNone, prompt, 3).logits) << name;
  }
}

}  // namespace
}  // namespace nw
