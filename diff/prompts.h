// `nw diff`'s prompts: from a campaign-like design point (task, haystack, length, needle
// position, campaign seed and trials: the very prompts `nw run` builds for those jobs, through
// task/job_prompt.h's BuildJobPrompt as the executors build them), or from a JSON prompts file:
//   {"prompts": [{"name": "p1", "tokens": [1, 2, 3]}, {"name": "p2", "text": "..."}]}
// ("name" optional; exactly one of "tokens" and "text"; text is tokenized with side A's
// tokenizer). Errors name the file and the field ("p.json: prompts[1].tokens[3]: ...").
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/text/tokenizer.h"

namespace nw::diff {

struct DiffPrompt {
  std::string name;
  std::vector<int32_t> tokens;
};

struct PromptDesign {
  std::string task = "niah-single";
  std::string haystack = "noise";
  int64_t context_length = 1024;
  double needle_position = 0.5;
  int64_t seed = 0;  // the campaign seed
  int trials = 1;    // trial t uses DeriveTrialSeed(seed, t), as a campaign's `trials:`
};

/// The prompts of a design point (one per trial), named "trial T".
Result<std::vector<DiffPrompt>> DesignPrompts(const Tokenizer& tokenizer, const PromptDesign& d);
/// The prompts of a prompts file; every token id checked against `vocab`.
Result<std::vector<DiffPrompt>> FilePrompts(const std::filesystem::path& path,
                                            const Tokenizer& tokenizer, int64_t vocab);

}  // namespace nw::diff
