// Engine: needlework's DeepSeek-V4 inference engine, the API the worker calls.
//
// An Engine owns one loaded model (config, tokenizer, weights) on one backend. Generate() runs a
// prompt through prefill and greedy step decode, optionally capturing indexer probes;
// GenerateBatch() runs several prompts with their decode steps batched.
// Thread-safety: an Engine is used by one thread at a time (one engine per worker slot); Load()
// is safe to call concurrently for different engines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/model_files.h"
#include "engine/checkpoint/weights.h"
#include "engine/precision.h"
#include "engine/text/tokenizer.h"

namespace nw {

class Tokenizer;

/// Engine semantic version: bump it whenever outputs of any backend may change. It is part of
/// every job key, so results from an older engine are never reused for a newer one.
/// 0.2.0: the shared expert's SwiGLU is clamped unless config.json says
/// "swiglu_clamp_shared_expert": false (a config without the key runs differently under the same
/// config digest; docs/engine-reference.md).
inline constexpr const char* kEngineVersion = "nw-engine-0.2.0";

enum class KvLayout {
  kContiguous,  // one buffer per layer per request
  kPaged,       // pages of 64 entries addressed through a block table
};

struct EngineOptions {
  std::string backend = "cpu";  // "cpu": contiguous KV, the whole prompt in one pass (ragged
                                // prefill); "cpu-paged": paged KV, prefill in chunks of 256
                                // tokens through the paged cache and indexer, like decode;
                                // "cpu-pd": prefill on one instance, the decode state sent as
                                // a transfer buffer to a paged instance that decodes
                                // (engine/parallel/pd_generate.h). All three give
                                // bit-identical results (engine/cpu/sequence.h).
};

/// What to capture from the indexer for one request.
struct ProbeRequest {
  int64_t needle_begin = 0;  // token range of the needle in the prompt, [begin, end)
  int64_t needle_end = 0;
  int64_t query_begin = 0;      // probe every query position t in [query_begin, prompt_len) and
                                // every decode step
  bool keep_topk_sets = false;  // also return the selected entry ids per position
};

/// Probe output for one indexer layer (a ratio-4 layer). Entry i of a ratio-4 layer pools
/// tokens 4(i-1) .. 4i+3 and is visible to query t iff i < (t+1)/4; it "covers the needle" when
/// that token range overlaps [needle_begin, needle_end). Ranks order the visible entries by
/// indexer score, higher first, ties to the lower entry id (the order top-k selects in).
struct IndexerProbe {
  int layer = 0;                     // layer id
  std::vector<int64_t> positions;    // query positions probed (prompt positions, then the
                                     // position of each decode step)
  std::vector<int32_t> needle_rank;  // per position: best (0-based) rank among the visible
                                     // compressed entries that cover the needle; -1 if none
                                     // is visible yet
  std::vector<uint8_t> in_topk;      // per position: 1 if any needle entry was selected
  std::vector<int32_t> num_visible;  // per position: visible compressed entries
  std::vector<float> needle_score;   // per position: indexer score of the best-ranked needle
                                     // entry (NaN if none is visible)
  std::vector<float> kth_score;      // per position: score of the k-th selected entry, the bar
                                     // a needle entry must clear (NaN if fewer than k visible)
  std::vector<int32_t> topk_sets;    // positions.size() * topk entry ids in rank order (-1
                                     // padded), if asked
  int topk = 0;                      // the request's effective top-k
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_new_tokens = 16;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  int index_topk = 0;                // 0 = the model's index_topk
  PrecisionProfile precision;
  std::optional<ProbeRequest> probe;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (the stop token included if hit)
  bool stopped = false;         // ended on a stop token (else: max_new_tokens reached)
  double prefill_ms = 0;
  double decode_ms = 0;
  std::vector<IndexerProbe> probes;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual std::string backend() const = 0;
  /// Device description for result rows ("cpu", "NVIDIA H200").
  virtual std::string device() const = 0;
  /// sha256 digests of the weights files, tokenizer.json and config.json, combined.
  virtual const std::string& model_digest() const = 0;
  virtual Result<GenerateResult> Generate(const GenerateRequest& request) = 0;
  /// Runs several requests together; result i is request i's, with the same tokens, stop flag
  /// and probes as Generate(request i). The CPU backends decode them in batched steps (one pass
  /// over the weights per step for every request; engine/cpu/batch.h); the default runs Generate
  /// for each in turn. An error in any request fails the call.
  virtual Result<std::vector<GenerateResult>> GenerateBatch(
      std::span<const GenerateRequest> requests);
};

/// A model folder read and checked, not yet bound to a backend: what LoadEngine and `nw serve`
/// both start from. Errors name the file at fault.
struct LoadedModel {
  ModelFiles files;
  ModelConfig config;
  Tokenizer tokenizer;
  ModelWeights weights;
};
Result<LoadedModel> LoadModelFolder(const std::filesystem::path& model_dir);

/// Loads DIR (config.json, model.safetensors or an index, tokenizer.json) on a backend. Errors
/// name the file at fault.
Result<std::unique_ptr<Engine>> LoadEngine(const std::filesystem::path& model_dir,
                                           const EngineOptions& options);

/// Builds an engine from a model already in memory (tests, benchmarks, tools): the config must
/// validate and the weights must match it (every tensor the forward pass reads is checked).
/// `model_digest` is reported as is.
Result<std::unique_ptr<Engine>> CreateEngine(ModelConfig config, Tokenizer tokenizer,
                                             ModelWeights weights, std::string model_digest,
                                             const EngineOptions& options);

/// Backends this build can run: "cpu", "cpu-paged", "cpu-pd".
std::vector<std::string> AvailableBackends();

}  // namespace nw
