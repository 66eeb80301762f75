// ServeModel: the model behind `nw serve`. It loads a model folder once and runs requests on one
// engine backend (engine/backend.h; any catalog backend CreateBackend can create here), with what
// a server needs beyond Engine::Generate: temperature/top-p
// sampling with a seed, stop strings, a cancel flag checked between decode steps, and the indexer
// top-k sets of every position (sglang's return_indexer_topk).
//
// A request runs either whole (Generate) or step by step as a ServeGeneration (Start): prompt
// chunks (PrefillChunk) and decode steps shared with other requests (DecodeStep through
// Backend::DecodeBatch: on the CPU backends one batched pass over the weights for all of them,
// engine/cpu/batch.h). Chunking and batching change no value: greedy requests (temperature 0) get
// tokens bit-identical to the in-process engine's.
// Thread-safety: Generate, Start, DecodeStep and a ServeGeneration's methods are called by one
// thread at a time (the server's scheduler thread); the accessors are safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/engine.h"
#include "engine/precision.h"
#include "engine/text/tokenizer.h"

namespace nw {

struct ServeRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;                  // 0 only with prompt_logprobs (scores the prompt alone)
  int min_tokens = 0;                   // the stop tokens cannot be picked before this many
  double temperature = 0;               // 0 = greedy
  double top_p = 1;                     // nucleus sampling when temperature > 0
  int top_k = 0;                        // > 0: sample among the k likeliest tokens only
  int logprobs = -1;                    // >= 0: each generated token's logprob and the top N
  bool prompt_logprobs = false;         // the prompt's tokens too (echo); needs logprobs >= 0
  uint64_t seed = 0;                    // sampling seed
  std::vector<std::string> stop;        // generation ends when the text contains one
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one
  bool ignore_eos = false;              // else the model's eos token stops generation
  int index_topk = 0;                   // 0 = the model's
  PrecisionProfile precision;           // weights format requantized on first use, then cached
  Fault fault = Fault::kNone;           // known-bug replay; the server admits one only when
                                        // started with --allow-faults
  bool return_indexer_topk = false;
  const std::atomic<bool>* cancel = nullptr;  // checked between decode steps
};

/// One token's log-probability under the model (natural log of the softmax at temperature 1)
/// and the `top` likeliest tokens at its position, highest first (ties to the lower id).
struct TokenLogprob {
  int32_t token = 0;
  std::optional<double> logprob;  // none for the first prompt token (nothing predicts it)
  std::vector<std::pair<int32_t, double>> top;
};

struct ServeResult {
  std::vector<int32_t> tokens;  // generated tokens, the stop token included
  // With logprobs >= 0: the prompt's tokens (prompt_logprobs) then the generated ones.
  std::vector<TokenLogprob> logprobs;
  std::string text;             // decoded, without the stop token and from the stop string on
  std::string finish_reason;    // stop | length
  nlohmann::json matched_stop;  // the stop token id or stop string, else null
  double prefill_ms = 0;        // from the first prompt chunk to the first generated token
  double decode_ms = 0;         // from the first generated token to the last
  // return_indexer_topk: shape (rows, layers, topk) row-major, rows = prompt + generated - 1
  // (one per position the model ran), request-local compressed entry ids in rank order, -1
  // padded; indexer_layers names the layer of each of the `layers` slices.
  std::vector<int32_t> indexer_topk;
  int64_t indexer_rows = 0;
  int indexer_topk_width = 0;
  std::vector<int> indexer_layers;
};

class ServeModel;

/// One request in flight: its BackendSequence (KV caches), the tokens generated so far and its
/// sampler. Made by ServeModel::Start; the model must outlive it.
class ServeGeneration {
 public:
  ~ServeGeneration();
  ServeGeneration(const ServeGeneration&) = delete;
  ServeGeneration& operator=(const ServeGeneration&) = delete;

  int64_t prompt_tokens() const { return static_cast<int64_t>(request_.prompt.size()); }
  /// Prompt tokens still to run.
  int64_t prompt_left() const { return prompt_tokens() - prefilled_; }
  /// The prompt has run and no stop condition is met yet: the request takes decode steps.
  bool decoding() const { return prompt_left() == 0 && !finished_; }
  bool finished() const { return finished_; }
  int64_t generated() const { return static_cast<int64_t>(result_.tokens.size()); }

  /// Runs up to `max_tokens` (>= 1) more prompt tokens; after the last one, picks the first
  /// generated token (which may already finish the request).
  Status PrefillChunk(int64_t max_tokens);
  /// The answer so far; call once finished (text cut at a stop string, indexer top-k filled in).
  ServeResult TakeResult();
  /// While not finished: the text generated so far that is final for a stream: without a tail
  /// that could still become a stop string (the longest stop string's length less one byte) and
  /// without an incomplete UTF-8 character at the end. Each call's text extends the previous
  /// one's, and TakeResult's text extends it too.
  std::string StreamableText() const;

 private:
  friend class ServeModel;
  struct Private {
    explicit Private() = default;
  };

 public:
  ServeGeneration(Private, const ServeModel& model, ServeRequest request,
                  std::unique_ptr<BackendSequence> seq);

 private:
  // Takes the logits of the last token run: picks the next token and checks the stop conditions.
  void Next(const float* logits);
  // Appends `token`'s logprob under `logits` (null: none) to the result.
  void AddLogprob(const float* logits, int32_t token);

  const ServeModel& model_;
  ServeRequest request_;
  std::unique_ptr<BackendSequence> seq_;
  std::vector<int32_t> stop_ids_;
  uint64_t rng_ = 0;
  int64_t prefilled_ = 0;
  bool finished_ = false;
  ServeResult result_;
  std::chrono::steady_clock::time_point prefill_start_, decode_start_;
  bool prefill_started_ = false;
};

class ServeModel {
 public:
  /// Loads DIR like LoadEngine does (config.json, tokenizer.json, weights) on a catalog backend
  /// (CreateBackend). Errors name the file at fault; a backend this build or machine cannot run
  /// (a cuda* one without a CUDA build or a GPU) is Unsupported, before any file is read.
  static Result<std::unique_ptr<ServeModel>> Load(const std::filesystem::path& dir,
                                                  const std::string& backend);
  ~ServeModel();

  const ModelConfig& config() const { return backend_impl_->config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const std::string& backend() const { return backend_; }
  const std::string& model_digest() const { return digest_; }

  /// Runs one request. Errors: InvalidArgument for a bad request (empty prompt, ids outside the
  /// vocabulary, an invalid profile), OutOfRange when prompt + max_tokens exceeds the model's
  /// max_position_embeddings, Cancelled when the cancel flag was raised.
  Result<ServeResult> Generate(const ServeRequest& request);

  /// Checks a request (the errors of Generate) and sets up its generation, before any token runs.
  Result<std::unique_ptr<ServeGeneration>> Start(const ServeRequest& request);
  /// One decode step for every generation in `gens` (each decoding(), distinct): their last
  /// tokens run through Backend::DecodeBatch (one batched pass on the CPU backends), then each
  /// picks its next token. On an error no generation has advanced (where the backend promises
  /// it: the CPU ones check everything first).
  Status DecodeStep(std::span<ServeGeneration* const> gens);

 private:
  struct Private {
    explicit Private() = default;
  };

 public:
  explicit ServeModel(Private) {}

 private:
  Tokenizer tokenizer_;
  std::string digest_;
  std::string backend_;
  std::unique_ptr<Backend> backend_impl_;  // owns the weights (and their requantized copies)
};

/// Samples a token from `logits` at `temperature` (> 0) with nucleus `top_p` among the `top_k`
/// likeliest tokens (0 = all), drawing from a SplitMix64 stream in *state: deterministic for a
/// given seed on every build.
int32_t SampleToken(const std::vector<float>& logits, double temperature, double top_p,
                    uint64_t* state, int top_k = 0);

}  // namespace nw
