// NIAH prompt builder tests, with a tokenizer trained in the test from NiahTokenizerCorpus:
// exact lengths over a grid of lengths x positions x tasks x haystacks, needle spans, negative
// positions, determinism, multikey and repeat structure, and rejected specs.
#include "task/niah.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/sha256.h"

namespace nw {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

Tokenizer TrainTokenizer() {
  Result<nlohmann::json> j =
      TrainByteLevelBpe(NiahTokenizerCorpus(2024, 400000), 1024, {"<bos>", "<eos>"});
  if (!j.ok()) {
    ADD_FAILURE() << j.status().ToString();
    return Tokenizer();
  }
  Result<Tokenizer> t = Tokenizer::FromJson(*j, "niah-trained");
  if (!t.ok()) {
    ADD_FAILURE() << t.status().ToString();
    return Tokenizer();
  }
  return std::move(t).value();
}

class NiahTest : public ::testing::Test {
 protected:
  // Trained once per test binary; immutable afterwards.
  static const Tokenizer& tok() {
    static const Tokenizer trained = TrainTokenizer();
    return trained;
  }
};

std::string Decode(const Tokenizer& tok, const NiahPrompt& p, int64_t begin, int64_t end) {
  return tok.Decode(std::span<const int32_t>(p.tokens).subspan(static_cast<size_t>(begin),
                                                               static_cast<size_t>(end - begin)));
}

std::string HashOf(const std::vector<int32_t>& ids) {
  std::string bytes;
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int s = 0; s < 32; s += 8) bytes.push_back(static_cast<char>((u >> s) & 0xFF));
  }
  return Sha256Hex(bytes);
}

// The key asked by the question.
std::string AskedKey(const Tokenizer& tok, const NiahPrompt& p) {
  const std::string q = Decode(tok, p, p.question_begin, static_cast<int64_t>(p.tokens.size()));
  std::smatch m;
  static const std::regex kRe("special magic number for (\\S+) mentioned");
  return std::regex_search(q, m, kRe) ? m[1].str() : "";
}

// (key, value) of a needle's text.
std::pair<std::string, std::string> NeedleKeyValue(const std::string& text) {
  std::smatch m;
  static const std::regex kRe("One of the special magic numbers for (\\S+) is: (\\d+)\\.");
  if (!std::regex_search(text, m, kRe)) return {"", ""};
  return {m[1].str(), m[2].str()};
}

// Checks everything a prompt promises; returns a description of the first broken promise.
void ExpectWellFormed(const Tokenizer& tok, const NiahSpec& spec, const NiahPrompt& p) {
  const int64_t n = spec.context_length;
  ASSERT_EQ(static_cast<int64_t>(p.tokens.size()), n);
  for (int32_t id : p.tokens) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
  ASSERT_LE(0, p.needle_begin);
  ASSERT_LT(p.needle_begin, p.needle_end);
  ASSERT_LE(p.needle_end, p.question_begin);
  ASSERT_LT(p.question_begin, n);
  // The needle's span decodes to the needle sentence, which holds the value.
  const std::string needle = Decode(tok, p, p.needle_begin, p.needle_end);
  ASSERT_EQ(needle, " One of the special magic numbers for " + AskedKey(tok, p) +
                        " is: " + p.expected + ".");
  ASSERT_EQ(static_cast<int>(p.expected.size()), spec.value_digits);
  const std::string question = Decode(tok, p, p.question_begin, n);
  ASSERT_THAT(question, StartsWith("\nWhat is the special magic number for "));
  ASSERT_TRUE(question.ends_with("mentioned in the provided text is"));
  ASSERT_THAT(p.text, StartsWith("Some special magic numbers are hidden"));
  ASSERT_EQ(tok.Decode(p.tokens), p.text);
  ASSERT_EQ(p.prompt_hash, HashOf(p.tokens));
  // Task needles.
  int targets = 0;
  bool target_listed = false;
  for (const NiahNeedle& nd : p.needles) {
    const auto [k, v] = NeedleKeyValue(Decode(tok, p, nd.begin, nd.end));
    ASSERT_FALSE(k.empty());
    if (nd.target) {
      ++targets;
      ASSERT_EQ(v, p.expected);
    } else {
      ASSERT_NE(k, AskedKey(tok, p));
      ASSERT_NE(v, p.expected);
    }
    if (nd.begin == p.needle_begin && nd.end == p.needle_end) target_listed = true;
  }
  ASSERT_TRUE(target_listed);
  switch (spec.task) {
    case NiahTask::kSingle:
      ASSERT_EQ(p.needles.size(), 1u);
      break;
    case NiahTask::kMultikey:
      ASSERT_EQ(p.needles.size(), static_cast<size_t>(spec.distractors) + 1);
      ASSERT_EQ(targets, 1);
      break;
    case NiahTask::kRepeat:
      ASSERT_EQ(p.needles.size(), static_cast<size_t>(spec.repeats));
      ASSERT_EQ(targets, spec.repeats);
      break;
  }
  if (spec.needle_position < 0) {
    ASSERT_EQ(p.needle_end, n + static_cast<int64_t>(spec.needle_position));
  }
}

TEST_F(NiahTest, ExactLengthGrid) {
  const std::vector<int64_t> lengths = {200, 201, 257, 333, 512, 1000, 1777, 2500, 4096, 5000};
  const std::vector<double> fractions = {0.0, 0.1, 0.5, 0.9, 1.0};
  int built = 0;
  int rejected = 0;
  for (NiahTask task : {NiahTask::kSingle, NiahTask::kMultikey, NiahTask::kRepeat}) {
    for (NiahHaystack hay : {NiahHaystack::kNoise, NiahHaystack::kEssay, NiahHaystack::kNeedles}) {
      for (int64_t len : lengths) {
        NiahSpec spec;
        spec.task = task;
        spec.haystack = hay;
        spec.context_length = len;
        spec.repeats = 3;
        spec.distractors = 2;
        spec.seed = static_cast<uint64_t>(len) * 31 + static_cast<uint64_t>(hay);
        std::vector<double> positions = fractions;
        // Negative positions relative to this prompt's question length.
        spec.needle_position = 0.5;
        Result<NiahPrompt> probe = BuildNiahPrompt(tok(), spec);
        ASSERT_TRUE(probe.ok()) << probe.status().ToString();
        const int64_t q = len - probe->question_begin;
        for (int64_t extra : {int64_t{0}, int64_t{1}, int64_t{57}}) {
          positions.push_back(-static_cast<double>(q + extra));
        }
        for (double pos : positions) {
          spec.needle_position = pos;
          SCOPED_TRACE(std::string(NiahTaskName(task)) + " " + std::string(NiahHaystackName(hay)) +
                       " len=" + std::to_string(len) + " pos=" + std::to_string(pos));
          Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
          if (!p.ok() && pos < -static_cast<double>(q)) {
            // Far from the end of a short prompt, the needles before the target may not fit;
            // then the error must say so and name the length that would work.
            std::smatch m;
            const std::string msg = p.status().message();
            ASSERT_TRUE(
                std::regex_search(msg, m, std::regex("needle_position: .* at least (\\d+)")))
                << msg;
            ASSERT_GT(std::stoll(m[1].str()), len) << msg;
            ++rejected;
            continue;
          }
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          ExpectWellFormed(tok(), spec, *p);
          ++built;
        }
      }
    }
  }
  EXPECT_EQ(built + rejected, 3 * 3 * 10 * 8);
  EXPECT_LE(rejected, 12);  // only at the shortest lengths
}

TEST_F(NiahTest, FractionPutsTheNeedleNearThatPointOfTheHaystack) {
  NiahSpec spec;
  spec.context_length = 3000;
  spec.seed = 5;
  spec.needle_position = 0.0;
  Result<NiahPrompt> start = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(start.ok());
  const int64_t prefix = start->needle_begin;  // needle right after the instruction
  EXPECT_EQ(start->text.find(" One of the special magic numbers"),
            std::string("Some special magic numbers are hidden within the following text. Make "
                        "sure to memorize them. I will quiz you about the numbers afterwards.\n"
                        "Text:")
                .size());
  spec.needle_position = 1.0;
  Result<NiahPrompt> end = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->needle_end, end->question_begin);  // needle right before the question
  const int64_t needle_len = end->needle_end - end->needle_begin;
  const int64_t haystack = end->question_begin - prefix - needle_len;
  for (double f : {0.25, 0.5, 0.75}) {
    spec.needle_position = f;
    Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
    ASSERT_TRUE(p.ok());
    const double at = static_cast<double>(p->needle_begin - prefix);
    EXPECT_NEAR(at, f * static_cast<double>(haystack), 40.0) << f;  // within a sentence or so
    // The needle sits at a sentence boundary: the text before it ends a sentence.
    const std::string before = Decode(tok(), *p, 0, p->needle_begin);
    EXPECT_TRUE(before.ends_with(".")) << before.substr(before.size() - 30);
  }
}

TEST_F(NiahTest, NegativePositions) {
  NiahSpec spec;
  spec.context_length = 1500;
  spec.seed = 77;
  spec.needle_position = 0.5;
  Result<NiahPrompt> probe = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(probe.ok());
  const int64_t q = 1500 - probe->question_begin;
  for (int64_t n : {q, q + 1, q + 2, q + 10, q + 100, int64_t{1000}}) {
    spec.needle_position = -static_cast<double>(n);
    Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ExpectWellFormed(tok(), spec, *p);
    EXPECT_EQ(p->needle_end, 1500 - n);
    EXPECT_EQ(p->question_begin - p->needle_end, n - q);
  }
  // Inside the question: rejected.
  spec.needle_position = -static_cast<double>(q - 1);
  Result<NiahPrompt> inside = BuildNiahPrompt(tok(), spec);
  ASSERT_FALSE(inside.ok());
  EXPECT_EQ(inside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(inside.status().message(), HasSubstr("needle_position"));
  // So far from the end that the needle would overlap the instruction: rejected.
  spec.needle_position = -1490;
  Result<NiahPrompt> too_far = BuildNiahPrompt(tok(), spec);
  ASSERT_FALSE(too_far.ok());
  EXPECT_THAT(too_far.status().message(), HasSubstr("needle_position"));
  // Not a whole number of tokens.
  spec.needle_position = -40.5;
  EXPECT_THAT(BuildNiahPrompt(tok(), spec).status().message(), HasSubstr("needle_position"));
}

TEST_F(NiahTest, EveryLengthFromTheMinimumWorks) {
  for (NiahHaystack hay : {NiahHaystack::kNoise, NiahHaystack::kEssay, NiahHaystack::kNeedles}) {
    NiahSpec spec;
    spec.haystack = hay;
    spec.seed = 3;
    spec.context_length = 10;
    Result<NiahPrompt> small = BuildNiahPrompt(tok(), spec);
    ASSERT_FALSE(small.ok());
    EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(small.status().message(), HasSubstr("context_length: 10 tokens is too short"));
    // Find the minimum from the message and check every length from there up to +150.
    int64_t minimum = 0;
    for (int64_t len = 11; len < 400; ++len) {
      spec.context_length = len;
      if (BuildNiahPrompt(tok(), spec).ok()) {
        minimum = len;
        break;
      }
    }
    ASSERT_GT(minimum, 0);
    EXPECT_THAT(small.status().message(),
                HasSubstr("need at least " + std::to_string(minimum) + " tokens"));
    for (int64_t len = minimum; len < minimum + 150; ++len) {
      spec.context_length = len;
      spec.needle_position = static_cast<double>(len % 7) / 6.0;
      Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
      ASSERT_TRUE(p.ok()) << len << ": " << p.status().ToString();
      ExpectWellFormed(tok(), spec, *p);
    }
  }
}

TEST_F(NiahTest, DeterministicBySeed) {
  NiahSpec spec;
  spec.task = NiahTask::kMultikey;
  spec.haystack = NiahHaystack::kEssay;
  spec.context_length = 2048;
  spec.needle_position = 0.3;
  spec.seed = 123456789;
  Result<NiahPrompt> a = BuildNiahPrompt(tok(), spec);
  Result<NiahPrompt> b = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->text, b->text);
  EXPECT_EQ(a->prompt_hash, b->prompt_hash);
  EXPECT_EQ(a->expected, b->expected);
  EXPECT_EQ(a->needle_begin, b->needle_begin);

  std::set<std::string> texts, values, hashes;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    spec.seed = seed;
    Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
    ASSERT_TRUE(p.ok());
    texts.insert(p->text);
    values.insert(p->expected);
    hashes.insert(p->prompt_hash);
  }
  EXPECT_EQ(texts.size(), 8u);
  EXPECT_EQ(hashes.size(), 8u);
  EXPECT_GE(values.size(), 7u);

  // Key and value depend on the seed only, not on the length or position.
  spec.seed = 42;
  Result<NiahPrompt> short_one = BuildNiahPrompt(tok(), spec);
  spec.context_length = 4000;
  spec.needle_position = -100;
  Result<NiahPrompt> long_one = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(short_one.ok() && long_one.ok());
  EXPECT_EQ(short_one->expected, long_one->expected);
  EXPECT_EQ(AskedKey(tok(), *short_one), AskedKey(tok(), *long_one));
}

TEST_F(NiahTest, HaystackKindsDiffer) {
  NiahSpec spec;
  spec.context_length = 3000;
  spec.seed = 9;
  spec.haystack = NiahHaystack::kNoise;
  Result<NiahPrompt> noise = BuildNiahPrompt(tok(), spec);
  spec.haystack = NiahHaystack::kEssay;
  Result<NiahPrompt> essay = BuildNiahPrompt(tok(), spec);
  spec.haystack = NiahHaystack::kNeedles;
  Result<NiahPrompt> needles = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(noise.ok() && essay.ok() && needles.ok());
  EXPECT_EQ(noise->expected, essay->expected);  // same seed, same needle

  EXPECT_THAT(noise->text, HasSubstr("The grass is green."));
  EXPECT_THAT(noise->text, HasSubstr("There and back again."));
  // Seeded variety: not only RULER's five sentences.
  static const std::regex kThe("The (\\w+) is (\\w+)\\.");
  std::set<std::string> noise_sentences;
  for (auto it = std::sregex_iterator(noise->text.begin(), noise->text.end(), kThe);
       it != std::sregex_iterator(); ++it) {
    noise_sentences.insert(it->str());
  }
  EXPECT_GT(noise_sentences.size(), 10u);

  // Essay: paragraphs and many distinct sentences.
  EXPECT_THAT(essay->text, HasSubstr("\n\n"));
  std::set<std::string> essay_sentences;
  size_t start = essay->text.find("Text:") + 5;
  for (size_t dot; (dot = essay->text.find('.', start)) != std::string::npos; start = dot + 1) {
    essay_sentences.insert(essay->text.substr(start, dot - start));
  }
  EXPECT_GT(essay_sentences.size(), 80u);

  // Needles haystack: many needles, all keys distinct, the asked key exactly once.
  static const std::regex kNeedle("special magic numbers for (\\S+) is: (\\d+)\\.");
  std::set<std::string> keys;
  int count = 0;
  int asked = 0;
  const std::string asked_key = AskedKey(tok(), *needles);
  for (auto it = std::sregex_iterator(needles->text.begin(), needles->text.end(), kNeedle);
       it != std::sregex_iterator(); ++it) {
    ++count;
    keys.insert((*it)[1].str());
    if ((*it)[1].str() == asked_key) {
      ++asked;
      EXPECT_EQ((*it)[2].str(), needles->expected);
    } else {
      EXPECT_NE((*it)[2].str(), needles->expected);
    }
  }
  EXPECT_GT(count, 50);
  EXPECT_EQ(static_cast<int>(keys.size()), count);
  EXPECT_EQ(asked, 1);
}

TEST_F(NiahTest, MultikeyKeysDistinctAndTargetAsked) {
  NiahSpec spec;
  spec.task = NiahTask::kMultikey;
  spec.distractors = 12;
  spec.context_length = 4000;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    spec.seed = seed;
    spec.needle_position = static_cast<double>(seed % 5) / 4.0;
    Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ExpectWellFormed(tok(), spec, *p);
    std::set<std::string> keys;
    for (const NiahNeedle& nd : p->needles) {
      keys.insert(NeedleKeyValue(Decode(tok(), *p, nd.begin, nd.end)).first);
    }
    EXPECT_EQ(keys.size(), 13u);
    EXPECT_EQ(keys.count(AskedKey(tok(), *p)), 1u);
    // Distractors are scattered, not piled in one spot.
    std::set<int64_t> begins;
    for (const NiahNeedle& nd : p->needles) begins.insert(nd.begin / 500);
    EXPECT_GE(begins.size(), 4u);
  }
}

TEST_F(NiahTest, RepeatCopiesAreEvenlySpaced) {
  NiahSpec spec;
  spec.task = NiahTask::kRepeat;
  spec.repeats = 5;
  spec.context_length = 5000;
  spec.seed = 31;
  spec.needle_position = 0.3;
  Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ExpectWellFormed(tok(), spec, *p);
  ASSERT_EQ(p->needles.size(), 5u);
  const std::string first = Decode(tok(), *p, p->needles[0].begin, p->needles[0].end);
  for (const NiahNeedle& nd : p->needles) {
    EXPECT_EQ(Decode(tok(), *p, nd.begin, nd.end), first);
  }
  // Copies at fractions 0.3 (target), 0.5, 0.7, 0.9 and 0.1 (wrapped round): gaps of about a
  // fifth of the haystack, and the 0.1 copy comes first in the text.
  EXPECT_EQ(p->needles[1].begin, p->needle_begin);
  const double fifth = (5000.0 - 250.0) / 5.0;
  for (size_t i = 1; i < p->needles.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(p->needles[i].begin - p->needles[i - 1].begin), fifth, 120.0);
  }
  // Negative position: copies evenly spread before the target, which is the last.
  spec.needle_position = -60;
  Result<NiahPrompt> neg = BuildNiahPrompt(tok(), spec);
  ASSERT_TRUE(neg.ok()) << neg.status().ToString();
  ExpectWellFormed(tok(), spec, *neg);
  EXPECT_EQ(neg->needles.back().begin, neg->needle_begin);
}

TEST_F(NiahTest, ValueDigits) {
  NiahSpec spec;
  spec.context_length = 600;
  for (int digits : {1, 4, 7, 12, 30}) {
    spec.value_digits = digits;
    spec.seed = static_cast<uint64_t>(digits);
    Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ExpectWellFormed(tok(), spec, *p);
    EXPECT_EQ(static_cast<int>(p->expected.size()), digits);
    EXPECT_EQ(p->expected.find_first_not_of("0123456789"), std::string::npos);
    if (digits > 1) {
      EXPECT_NE(p->expected[0], '0');
    }
  }
}

TEST_F(NiahTest, RejectsBadSpecs) {
  auto message = [](NiahSpec spec) {
    Result<NiahPrompt> p = BuildNiahPrompt(tok(), spec);
    EXPECT_FALSE(p.ok());
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    }
    return p.status().message();
  };
  NiahSpec base;
  base.context_length = 1000;
  NiahSpec s = base;
  s.context_length = 0;
  EXPECT_THAT(message(s), HasSubstr("context_length"));
  s = base;
  s.needle_position = 1.5;
  EXPECT_THAT(message(s), HasSubstr("needle_position"));
  s.needle_position = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(message(s), HasSubstr("needle_position"));
  s = base;
  s.task = NiahTask::kRepeat;
  s.repeats = 0;
  EXPECT_THAT(message(s), HasSubstr("repeats"));
  s.repeats = 200;  // 200 needles do not fit 1000 tokens
  EXPECT_THAT(message(s), HasSubstr("context_length: 1000 tokens is too short for niah-repeat"));
  s = base;
  s.task = NiahTask::kMultikey;
  s.distractors = -1;
  EXPECT_THAT(message(s), HasSubstr("distractors"));
  s = base;
  s.value_digits = 0;
  EXPECT_THAT(message(s), HasSubstr("value_digits"));
}

TEST(NiahNamesTest, ParseAndName) {
  for (NiahTask t : {NiahTask::kSingle, NiahTask::kMultikey, NiahTask::kRepeat}) {
    Result<NiahTask> back = ParseNiahTask(NiahTaskName(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
  }
  for (NiahHaystack h : {NiahHaystack::kNoise, NiahHaystack::kEssay, NiahHaystack::kNeedles}) {
    Result<NiahHaystack> back = ParseNiahHaystack(NiahHaystackName(h));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, h);
  }
  EXPECT_EQ(NiahTaskName(NiahTask::kMultikey), "niah-multikey");
  EXPECT_EQ(NiahHaystackName(NiahHaystack::kEssay), "essay");
  EXPECT_THAT(ParseNiahTask("niah-double").status().message(), HasSubstr("niah-double"));
  EXPECT_THAT(ParseNiahHaystack("hay").status().message(), HasSubstr("haystack"));
}

TEST(NiahCorpusTest, DeterministicAndRepresentative) {
  const std::string a = NiahTokenizerCorpus(5, 100000);
  EXPECT_GE(a.size(), 100000u);
  EXPECT_LT(a.size(), 110000u);
  EXPECT_EQ(a, NiahTokenizerCorpus(5, 100000));
  EXPECT_NE(a, NiahTokenizerCorpus(6, 100000));
  EXPECT_THAT(a, HasSubstr("One of the special magic numbers for "));
  EXPECT_THAT(a, HasSubstr("mentioned in the provided text is "));
  EXPECT_THAT(a, HasSubstr("The grass is green."));
  EXPECT_THAT(a, HasSubstr("Some special magic numbers are hidden"));
  EXPECT_THAT(a, HasSubstr("\n\n"));
}

TEST(NiahHandMadeTokenizerTest, ExactLengthWithTinyTokenizers) {
  for (const char* name : {"gpt2_tiny.json", "deepseek_tiny.json"}) {
    Result<Tokenizer> tok =
        Tokenizer::Load(std::filesystem::path(NW_TEST_DATA_DIR) / "tokenizer" / name);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    for (int64_t len : {900, 1301, 2000}) {
      for (double pos : {0.0, 0.6, 1.0, -200.0}) {
        NiahSpec spec;
        spec.task = NiahTask::kMultikey;
        spec.distractors = 1;
        spec.context_length = len;
        spec.needle_position = pos;
        spec.seed = 17;
        Result<NiahPrompt> p = BuildNiahPrompt(*tok, spec);
        ASSERT_TRUE(p.ok()) << name << " " << len << " " << pos << ": " << p.status().ToString();
        ExpectWellFormed(*tok, spec, *p);
      }
    }
  }
}

}  // namespace
}  // namespace nw
