// NIAH prompt builder: needle-in-a-haystack prompts of an exact token length.
//
// The haystack comes from a generator seeded by the job's own parameters (noise sentences, an
// essay-like generator, or distractor needles), the needle goes in at the sentence boundary
// nearest the requested position, then the question. The builder records the realized token
// offset of the needle, the expected answer and the prompt hash. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/text/tokenizer.h"

namespace nw {

enum class NiahTask { kSingle, kMultikey, kRepeat };   // niah-single | niah-multikey | niah-repeat
enum class NiahHaystack { kNoise, kEssay, kNeedles };  // noise | essay | needles

Result<NiahTask> ParseNiahTask(std::string_view name);
Result<NiahHaystack> ParseNiahHaystack(std::string_view name);
std::string_view NiahTaskName(NiahTask t);
std::string_view NiahHaystackName(NiahHaystack h);

struct NiahSpec {
  NiahTask task = NiahTask::kSingle;
  NiahHaystack haystack = NiahHaystack::kNoise;
  int64_t context_length = 0;  // exact prompt length in tokens
  /// >= 0: fraction of the haystack (0 = start, 1 = just before the question);
  /// < 0: the needle ends this many tokens before the end of the prompt (e.g. -30).
  double needle_position = 0.5;
  uint64_t seed = 0;     // derived from the job's parameters
  int repeats = 8;       // niah-repeat: copies of the needle
  int distractors = 4;   // niah-multikey: other keys with other values
  int value_digits = 7;  // digits of the magic number, in [1, 64]
};

/// A needle placed by the task (haystack needles of the `needles` haystack are not listed).
struct NiahNeedle {
  int64_t begin = 0;    // token offset
  int64_t end = 0;      // exclusive
  bool target = false;  // carries the asked key and the expected value
};

struct NiahPrompt {
  std::vector<int32_t> tokens;  // exactly context_length tokens
  std::string expected;         // the answer value (e.g. "4096213")
  int64_t needle_begin = 0;     // token offset of the target needle at the requested position
  int64_t needle_end = 0;       // exclusive
  int64_t question_begin = 0;   // token offset where the question starts
  std::string prompt_hash;      // sha256 over the token ids (little-endian int32)
  std::string text;             // the prompt text (for logs and debugging)
  std::vector<NiahNeedle>
      needles;  // every task needle in prompt order (repeat copies, distractors)
};

/// Builds the prompt: instruction, haystack with the needle(s), then the question
/// ("... The special magic number for {key} mentioned in the provided text is"), each segment
/// tokenized on its own so the length is exact and every needle's span is known. Needle:
/// "One of the special magic numbers for {key} is: {value}." Keys, values and the haystack are
/// functions of spec.seed only (the same key and value at every length and position).
/// niah-repeat: the other copies are spaced 1/repeats of the haystack apart, continuing from the
/// requested position and wrapping round; with a negative position they share the haystack before
/// the target. niah-multikey: distractors at seeded fractions (before the target when negative).
/// Errors: InvalidArgument naming the field (context_length too short for instruction + needles +
/// question, an impossible needle_position, bad repeats/distractors/value_digits);
/// FailedPrecondition when the tokenizer has no single-token filler (" .", ".", " " or "\n").
Result<NiahPrompt> BuildNiahPrompt(const Tokenizer& tokenizer, const NiahSpec& spec);

/// Text for training a tokenizer: haystack/needle/question text from the same generators.
std::string NiahTokenizerCorpus(uint64_t seed, size_t approx_bytes);

}  // namespace nw
