// JobSpec -> NIAH task: the one place that reads a job's task fields (task, haystack,
// context_length, needle_position and the haystack seed of its design point) into the prompt
// builder's NiahSpec, for every executor (worker/engine_executor, http/http_executor) so that the
// same job gives the same prompt, token for token, whichever backend answers it.
// Thread-safety: pure functions.
#pragma once

#include "common/status.h"
#include "engine/text/tokenizer.h"
#include "protocol/job.h"
#include "task/niah.h"

namespace nw {

/// The job's NiahSpec: task and haystack parsed (their parse errors as they are), length and
/// position copied, seed = spec.HaystackSeed(); repeats, distractors and value_digits keep
/// NiahSpec's defaults (they are not job fields).
Result<NiahSpec> NiahSpecForJob(const JobSpec& spec);

/// BuildNiahPrompt(tokenizer, NiahSpecForJob(spec)).
Result<NiahPrompt> BuildJobPrompt(const Tokenizer& tokenizer, const JobSpec& spec);

}  // namespace nw
