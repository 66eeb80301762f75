// Scoring: turns a generated answer into an Outcome.
//
// The answer is the generated text up to the first newline (the model may go on talking after
// it). Rules, in order:
//   empty      the answer is empty or only whitespace;
//   pass       the answer contains the expected value (exact substring);
//   truncated  generation stopped at max_new_tokens without a stop token, and the answer ends
//              with a non-empty proper prefix of the expected value (more tokens might have
//              finished it);
//   miss       anything else.
// engine_error and timeout come from the executor, never from scoring.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "protocol/job.h"

namespace nw {

struct ScoreInput {
  std::string_view generated;  // decoded generated text
  std::string_view expected;   // the needle's value
  bool stopped = false;        // generation ended on a stop token
};

Outcome ScoreAnswer(const ScoreInput& in);
/// The part of the generated text that is scored (up to the first newline, trimmed).
std::string AnswerSpan(std::string_view generated);

}  // namespace nw
