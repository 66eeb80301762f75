// ServeModel: the model behind `nw serve`. It loads a model folder once and runs one request at
// a time on the CPU reference backend, with what a server needs beyond Engine::Generate:
// temperature/top-p sampling with a seed, stop strings, a cancel flag checked between decode
// steps, and the indexer top-k sets of every position (sglang's return_indexer_topk).
//
// Greedy requests (temperature 0) run exactly the steps of cpu::Generate (prefill, then argmax
// and one decode per token), so their tokens are bit-identical to the in-process engine's.
// Thread-safety: Generate is called by one thread at a time (the server's engine thread); the
// accessors are safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/engine.h"
#include "engine/precision.h"
#include "engine/text/tokenizer.h"

namespace nw {

struct ServeRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  double temperature = 0;               // 0 = greedy
  double top_p = 1;                     // nucleus sampling when temperature > 0
  uint64_t seed = 0;                    // sampling seed
  std::vector<std::string> stop;        // generation ends when the text contains one
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one
  bool ignore_eos = false;              // else the model's eos token stops generation
  int index_topk = 0;                   // 0 = the model's
  PrecisionProfile precision;           // weights format requantized on first use, then cached
  bool return_indexer_topk = false;
  const std::atomic<bool>* cancel = nullptr;  // checked between decode steps
};

struct ServeResult {
  std::vector<int32_t> tokens;  // generated tokens, the stop token included
  std::string text;             // decoded, without the stop token and from the stop string on
  std::string finish_reason;    // stop | length
  nlohmann::json matched_stop;  // the stop token id or stop string, else null
  double prefill_ms = 0;
  double decode_ms = 0;
  // return_indexer_topk: shape (rows, layers, topk) row-major, rows = prompt + generated - 1
  // (one per position the model ran), request-local compressed entry ids in rank order, -1
  // padded; indexer_layers names the layer of each of the `layers` slices.
  std::vector<int32_t> indexer_topk;
  int64_t indexer_rows = 0;
  int indexer_topk_width = 0;
  std::vector<int> indexer_layers;
};

class ServeModel {
 public:
  /// Loads DIR like LoadEngine does (config.json, tokenizer.json, weights) for backend "cpu" or
  /// "cpu-paged". Errors name the file at fault.
  static Result<std::unique_ptr<ServeModel>> Load(const std::filesystem::path& dir,
                                                  const std::string& backend);
  ~ServeModel();

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const std::string& backend() const { return backend_; }
  const std::string& model_digest() const { return digest_; }

  /// Runs one request. Errors: InvalidArgument for a bad request (empty prompt, ids outside the
  /// vocabulary, an invalid profile), OutOfRange when prompt + max_tokens exceeds the model's
  /// max_position_embeddings, Cancelled when the cancel flag was raised.
  Result<ServeResult> Generate(const ServeRequest& request);

 private:
  struct Private {
    explicit Private() = default;
  };

 public:
  explicit ServeModel(Private) {}

 private:
  const ModelWeights& WeightsFor(NumFormat format);

  ModelConfig config_;
  Tokenizer tokenizer_;
  ModelWeights weights_;
  std::map<NumFormat, std::unique_ptr<ModelWeights>> requantized_;
  std::string digest_;
  std::string backend_;
  KvLayout layout_ = KvLayout::kContiguous;
  int64_t prefill_chunk_ = 0;  // tokens per prefill chunk, 0 = one pass
};

/// Samples a token from `logits` at `temperature` (> 0) with nucleus `top_p`, drawing from a
/// SplitMix64 stream in *state: deterministic for a given seed on every build.
int32_t SampleToken(const std::vector<float>& logits, double temperature, double top_p,
                    uint64_t* state);

}  // namespace nw
