// Backend-agnostic generation over the backend seam (backend.h): request checks, greedy decoding
// and the request drivers that Engine (engine.h), the worker and `nw serve` share on every
// backend.
//
//   CheckRequest   a request checked against the model (empty prompt, negative max_new_tokens or
//                  index_topk, ids outside the vocabulary, an invalid precision profile, a length
//                  above max_position_embeddings) and turned into the SequenceSpec to create;
//   DecodeGreedy   argmax decoding from the last prompt token's logits until a stop token or
//                  max_new_tokens;
//   Generate       one request: the backend's GenerateWhole if it has one (cpu-pd), else
//                  NewSequence + Prefill + (greedy draft) + DecodeGreedy;
//   GenerateBatch  several requests: each prefilled alone, then the unfinished ones decode in
//                  batched steps (Backend::DecodeBatch); results equal Generate of each.
// Thread-safety: as the Backend (one thread at a time).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/types.h"

namespace nw {

/// Index of the largest logit; ties go to the lowest id (NaN never wins over a number).
int32_t Argmax(const float* logits, int64_t n);
/// Internal (never retried: the same weights give the same logits) when a logit is NaN or
/// infinite: a token picked from such logits would score as a "miss" that says nothing about
/// retrieval. Checked before every greedy pick (DecodeGreedy, GenerateBatch).
Status CheckLogitsFinite(const float* logits, int64_t n, size_t step);

/// Checks `request` against the model and returns the spec of its sequence (max_tokens = prompt
/// + max_new_tokens). InvalidArgument for a bad request, OutOfRange for a length above
/// max_position_embeddings.
Result<SequenceSpec> CheckRequest(const ModelConfig& cfg, const GenerateRequest& request);

/// Greedy decode from `logits` (the last prompt token's [V]): appends argmax tokens to
/// result->tokens, stepping `seq`, until a stop token (result->stopped) or max_new_tokens.
Status DecodeGreedy(const ModelConfig& cfg, const GenerateRequest& request, BackendSequence* seq,
                    std::vector<float>* logits, GenerateResult* result);

/// Runs one request on `backend` (timing prefill_ms and decode_ms). Errors: CheckRequest's, and
/// the backend's.
///
/// Greedy drafts (GenerateRequest::draft, e.g. the needle's answer + EOS): when the first greedy
/// token is the draft's first, the draft (up to its first stop token, at most max_new_tokens - 1
/// tokens) runs as one multi-token step (BackendSequence::Extend) and each row's argmax is
/// checked against the next draft token. All equal: those tokens are taken and decoding goes on
/// from the last row, so a found needle costs one step instead of one per answer token. Greedy
/// leaves the draft inside the chunk: a sequence that can rewind (BackendSequence::Checkpoint,
/// the GPU ones) goes back to the end of the prompt and runs the agreeing tokens again, one more
/// step; one that cannot (the CPU ones) runs the request again without the draft. Tokens, stop flag
/// and probes are the same as without a draft in every case (Extend equals Decode bit for bit);
/// only the time differs. Ignored under a fault or a trace, and by GenerateBatch and the
/// whole-request backends (cpu-pd, cuda-pd).
Result<GenerateResult> Generate(Backend& backend, const GenerateRequest& request);

/// Runs several requests; result i has the tokens, stop flag and probes of Generate(request i).
/// prefill_ms is the request's own prefill, decode_ms the time from the first batched step to its
/// last token. A backend that runs requests whole (GenerateWhole) runs them one by one. An error
/// in any request fails the call (named "request i" where it is the request's own).
Result<std::vector<GenerateResult>> GenerateBatch(Backend& backend,
                                                  std::span<const GenerateRequest> requests);

}  // namespace nw
