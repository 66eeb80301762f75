// JobSpec and JobResult: what the coordinator sends a worker and what comes back.
//
// A JobSpec is the full, canonical description of one evaluation; its key is SHA-256 over the
// canonical JSON (sorted keys) plus the model digest and engine version, so identical jobs from
// different campaigns share one key and one result. Thread-safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/precision.h"

namespace nw {

/// Versions the meaning of JobSpec fields and the NIAH generator; part of every job key.
inline constexpr int kJobSchemaVersion = 2;  // 2: the haystack seed is the design point's

inline constexpr int kMaxSamplingTopK = 1 << 20;
inline constexpr int kMaxSamplingMinTokens = 1 << 20;

/// Sampling parameters an http campaign sends (`http: {sampling: {...}}`, docs/http.md). Each is
/// sent only when set; temperature is always sent, 0 (greedy) unless set.
struct HttpSampling {
  std::optional<double> temperature;  // 0..2
  std::optional<double> top_p;        // (0, 1]
  std::optional<int> top_k;           // >= 1 (vLLM/sglang extension)
  std::optional<int64_t> seed;        // >= 0
  std::optional<int> min_tokens;      // >= 0 (vLLM extension)

  bool empty() const { return !temperature && !top_p && !top_k && !seed && !min_tokens; }
  /// The set fields only, keys sorted ({} when empty): what goes into requests and job keys.
  nlohmann::json ToJson() const;
  /// InvalidArgument naming the field ("job.http.sampling.top_p: ...") for a wrong type, an
  /// unknown field or a value out of range.
  static Result<HttpSampling> FromJson(const nlohmann::json& j, const std::string& where);
  friend bool operator==(const HttpSampling&, const HttpSampling&) = default;
};

/// Settings of the `http` backend (docs/http.md): an OpenAI-compatible server evaluated over HTTP.
/// Only url, model, api, tokenizer_digest and engine_params identify results (KeyJson), plus
/// sampling and stream when set (so the keys of campaigns without them are unchanged); the rest
/// says how to reach the server and is not part of the job key. Never holds a secret: the API key
/// is read on the worker from the environment variable or file named here.
struct HttpBackendSpec {
  std::string url;                  // base URL, http(s)://host:port, with or without a trailing /v1
  std::string model;                // the server's model name (the requests' "model" field)
  std::string api = "completions";  // completions (token ids in) | chat (text in messages)
  std::string tokenizer;            // absolute path of the server model's tokenizer.json
  std::string tokenizer_digest;     // sha256 of that file, checked when a worker loads it
  bool engine_params = false;       // send the job's topk and precision (`nw serve` fields)
  std::map<std::string, std::string> headers;  // extra request headers (no secrets)
  std::string api_key_env;              // environment variable holding the API key (sent as Bearer)
  std::string api_key_file;             // or: absolute path of a file holding it
  int concurrency = 1;                  // requests in flight per worker
  int64_t timeout_ms = 600'000;         // per request
  int retries = 4;                      // after the first try, on 5xx/429/connection errors
  int64_t ready_timeout_ms = 120'000;   // waiting for the health path before the first job
  std::string health_path = "/health";  // "" skips the readiness wait
  int server_index_topk = 0;  // the served model's index_topk, to read indexer_topk from servers
                              // that do not report its shape (0: only servers that do)
  bool stream = false;        // stream the answer (SSE) and measure time to first token
  HttpSampling sampling;      // sent when set (else temperature 0)
  std::string ca_file;        // https: absolute path of extra trusted CA certificates (PEM)

  /// Every field (stream, sampling and ca_file only when set); keys sorted.
  nlohmann::json ToJson() const;
  static Result<HttpBackendSpec> FromJson(const nlohmann::json& j);
  /// What identifies results: {"api","engine_params","model","tokenizer_digest","url"}, plus
  /// "sampling" when any sampling field is set and "stream": true when streaming.
  nlohmann::json KeyJson() const;
  friend bool operator==(const HttpBackendSpec&, const HttpBackendSpec&) = default;
};

struct JobSpec {
  std::string model_dir;       // absolute path of the model folder on the worker
  std::string model_digest;    // sha256 over config, weights and tokenizer files
  std::string engine_version;  // kEngineVersion of the build that expanded the campaign
  std::string task;            // niah-single | niah-multikey | niah-repeat
  std::string haystack;        // noise | essay | needles
  int64_t context_length = 0;
  double needle_position = 0;  // fraction 0..1, or negative token offset from the end
  int topk = 0;                // index top-k used by the engine
  PrecisionProfile precision;
  std::string backend;  // cpu | cpu-paged | cpu-pd | cuda | cuda-paged | http
  int64_t seed = 0;     // campaign seed
  int trial = 0;        // trial index within the cell
  int max_new_tokens = 16;
  bool probe = false;                   // capture indexer probes
  std::optional<HttpBackendSpec> http;  // backend "http" only (and then required)
  std::string fault = "none";           // known-bug replay (engine/fault.h; docs/faults.md)

  /// Canonical JSON: sorted keys, no whitespace, stable number formatting. "http" is present only
  /// for http jobs and "fault" only when it is not "none", so the JSON (and key) of every other
  /// job is unchanged by those fields.
  nlohmann::json ToJson() const;
  static Result<JobSpec> FromJson(const nlohmann::json& j);
  /// 64 hex chars: sha256 of {"v":kJobSchemaVersion, "job":ToJson()} without model_dir (the key
  /// identifies content, not where the files live); for http jobs "http" is replaced by
  /// HttpBackendSpec::KeyJson() (no paths, timeouts or credentials in the key).
  std::string Key() const;
  /// Seed for the job's haystack generator, from the prompt's design point only (task,
  /// haystack, context_length, needle_position, seed, trial): jobs that differ only in what a
  /// campaign compares (model, engine, top-k, precision, backend, http server, probe,
  /// max_new_tokens) read the same prompt when their tokenizers are the same, so their answers
  /// compare one to one (gate pairs have the same prompt hash); different design points get
  /// different text.
  uint64_t HaystackSeed() const;
};

enum class Outcome { kPass, kMiss, kTruncated, kEmpty, kEngineError, kTimeout };
std::string_view OutcomeName(Outcome o);  // pass, miss, truncated, empty, engine_error, timeout
Result<Outcome> ParseOutcome(std::string_view name);
/// pass and miss are answers from the model; the rest are not retrieval results.
inline bool IsAnswerOutcome(Outcome o) { return o == Outcome::kPass || o == Outcome::kMiss; }

struct ProbeSummary {
  int layer = 0;
  int positions = 0;               // query positions probed
  int needle_rank_min = -1;        // best rank over positions (-1: never visible)
  double needle_rank_median = -1;  // median rank over positions where visible
  double in_topk_fraction = 0;     // fraction of positions where a needle entry was selected
  bool in_topk_last = false;       // selected at the last prompt position (the one that answers)
  int topk = 0;
  std::vector<int32_t> ranks;      // per position (-1 = not visible)
  std::vector<int32_t> topk_last;  // the selected entry ids at the last prompt position
};

/// Latency of a streamed answer (http backend with stream: true), measured by the worker from
/// the moment the request is sent. An "event" is one server-sent event that carried text or the
/// finish reason; a server may put several tokens in one event.
struct StreamTiming {
  double ttft_ms = 0;     // to the first event with text (time to first token)
  double tpot_ms = 0;     // mean time per output token after the first: (last event - first) /
                          // (completion tokens - 1); 0 with one token
  double itl_p50_ms = 0;  // median gap between consecutive events (inter-token latency)
  double itl_p95_ms = 0;  // 95th percentile of those gaps (nearest rank)
  int64_t events = 0;     // events with text or the finish reason

  nlohmann::json ToJson() const;
  static Result<StreamTiming> FromJson(const nlohmann::json& j);
  friend bool operator==(const StreamTiming&, const StreamTiming&) = default;
};

struct JobResult {
  std::string job_key;
  int attempt = 0;
  Outcome outcome = Outcome::kEngineError;
  std::string generated_text;
  std::string expected;
  int64_t needle_token_offset = -1;
  std::string prompt_hash;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  double total_ms = 0;
  std::string worker_id;
  std::string device;
  std::string engine_version;
  std::string error_code;  // StatusCodeName when outcome is engine_error / timeout
  std::string error_message;
  bool retryable = false;  // an engine_error that may succeed elsewhere (OOM, I/O)
  std::vector<ProbeSummary> probes;
  std::optional<StreamTiming> stream;  // streamed http answers only
  /// GPU workers that measure it (NVML): the mean of the GPU's utilization samples taken while
  /// the job ran, 0..1 (worker/gpu_busy_sampler.h); absent where not measured (CPU workers, no
  /// NVML, a job shorter than the driver's sample period). The GPU's, not the job's alone: other
  /// slots on the same GPU count too.
  std::optional<double> gpu_busy;

  /// "stream" and "gpu_busy" are present only when set.
  nlohmann::json ToJson() const;
  static Result<JobResult> FromJson(const nlohmann::json& j);
};

/// Bounds on what a worker reports, so a result fits its columns and means something.
inline constexpr size_t kMaxResultTextBytes = 1 << 20;  // generated_text, error_message, expected
inline constexpr size_t kMaxResultFieldBytes = 256;     // hashes, ids, codes
inline constexpr size_t kMaxProbes = 1024;              // probe summaries per result
inline constexpr int kMaxProbeLayer = 4095;             // layer indices 0..this
inline constexpr size_t kMaxProbeEntries = 1 << 20;     // ranks + topk_last, all probes
inline constexpr int64_t kMaxResultTokens = int64_t{1} << 32;
inline constexpr double kMaxResultMs = 1e10;  // about 115 days

/// The layers of a job's model that a probe may name: a probe summarizes one indexer, and only
/// layers with compress ratio 4 have one. Known to whoever can read the model's config.json.
struct ModelProbeLayers {
  int n_layers = 0;                 // layers of the model (0..n_layers-1 exist)
  std::vector<int> indexer_layers;  // ascending: the layers with an indexer
  /// InvalidArgument naming the layer when `layer` does not exist in the model or has no
  /// indexer ("layer 7 does not exist in the model (4 layers)").
  Status Check(int layer) const;
};

/// A result's plausibility (docs/protocol.md, "Size limits"): text and id sizes, non-negative
/// counts (needle_token_offset >= -1), finite non-negative timings, an error_code that is a
/// StatusCode name (or empty), probes with layers in 0..kMaxProbeLayer, ranks >= -1, fractions
/// in [0, 1], a median within [-1, positions), and bounded lists. When `spec` is given, probes
/// are allowed only for a job that asked for them, and no probe may look at more positions than
/// the prompt has. Each layer is probed at most once; when `layers` is given (the checker knows the
/// job's model), every probe's layer must exist in the model and have an indexer.
/// InvalidArgument naming the field.
Status CheckResultBounds(const JobResult& r, const JobSpec* spec = nullptr,
                         const ModelProbeLayers* layers = nullptr);

}  // namespace nw
