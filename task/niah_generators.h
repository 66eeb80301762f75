// Text generators behind the NIAH prompt builder and its tokenizer corpus: RULER-style noise
// sentences, an essay-like sentence generator, magic-number needles with seeded keys and values.
// Every generator is a deterministic function of its seed (see rng.h).
// Thread-safety: values; one owner each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>

#include "task/rng.h"

namespace nw::text {

/// One haystack sentence and the separator that goes before it (" ", or "\n\n" when the sentence
/// opens a new paragraph).
struct HaystackSentence {
  std::string separator;
  std::string body;
  std::string Text() const { return separator + body; }
};

/// The instruction before the haystack; it ends so that the first sentence's " " reads naturally.
std::string NiahPrefix();
/// "One of the special magic numbers for {key} is: {value}."
std::string NeedleSentence(const std::string& key, const std::string& value);
/// "\nWhat is the special magic number for {key} mentioned in the provided text? The special
/// magic number for {key} mentioned in the provided text is"
std::string NiahQuestion(const std::string& key);
/// A `digits`-digit decimal number (no leading zero unless digits == 1).
std::string RandomValue(Rng& rng, int digits);
/// A new key (a word or hyphenated word pair) not in `used`; it is added to `used`.
std::string NewKey(Rng& rng, std::unordered_set<std::string>* used);

/// An endless stream of haystack sentences.
class SentenceGenerator {
 public:
  virtual ~SentenceGenerator() = default;
  virtual HaystackSentence Next() = 0;
};

/// RULER's noise ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and
/// back again.") in its five-sentence rhythm, with seeded variations of each sentence.
std::unique_ptr<SentenceGenerator> MakeNoiseGenerator(uint64_t seed);
/// Essay-like prose: seeded templates over a few hundred words, in paragraphs of 3 to 7 sentences.
std::unique_ptr<SentenceGenerator> MakeEssayGenerator(uint64_t seed);
/// Distractor needles with fresh keys (never in `reserved_keys`, never repeated) and values that
/// differ from `avoid_value`.
std::unique_ptr<SentenceGenerator> MakeNeedleGenerator(
    uint64_t seed, std::unordered_set<std::string> reserved_keys, std::string avoid_value,
    int value_digits);

}  // namespace nw::text
