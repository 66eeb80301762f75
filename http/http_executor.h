// HttpExecutor: the JobExecutor of the `http` backend. For each job it builds the NIAH prompt
// with the tokenizer named for the server's model (so the prompt has exactly context_length
// tokens), sends it to an OpenAI-compatible server (token ids to /v1/completions, or the text as
// one user message to /v1/chat/completions), scores the answer like the in-process engine, and
// fills the probes from the server's indexer top-k when it returns them.
//
// Failures never become misses:
//   * connection errors, responses cut short or malformed, 5xx, 408 and 429 are retried with
//     exponential backoff (spec.http.retries times); when the retries are spent the job ends as
//     engine_error (code unavailable, so the coordinator may try it again later);
//   * no complete response within spec.http.timeout_ms -> timeout;
//   * other 4xx, a tokenizer whose digest changed, a missing API key, a prompt-token count that
//     disagrees with the server's -> engine_error (not retried).
// Before the first job against a server the executor waits for its health path (any answer
// below 500) up to spec.http.ready_timeout_ms.
//
// Thread-safety: one executor per worker slot. The executors of one worker share an
// HttpBackendPool (thread-safe): one keep-alive connection pool per server, whose size is the
// worker's concurrency limit, the readiness state, and the loaded tokenizers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "worker/engine_executor.h"
#include "worker/executor.h"

namespace nw {

class HttpClient;

/// What the executors of one worker share. Create one per worker and hand it to each executor.
class HttpBackendPool {
 public:
  HttpBackendPool();
  ~HttpBackendPool();
  HttpBackendPool(const HttpBackendPool&) = delete;
  HttpBackendPool& operator=(const HttpBackendPool&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct HttpExecutorOptions {
  std::string worker_id = "worker";
  std::shared_ptr<HttpBackendPool> pool;  // null: the executor makes its own
  int64_t backoff_initial_ms = 250;       // first retry delay, doubling
  int64_t backoff_max_ms = 8'000;
  int64_t ready_poll_ms = 200;                // between health checks while waiting for a server
  std::function<void(std::string_view)> log;  // retries and server problems (never secrets)
};

class HttpExecutor final : public JobExecutor {
 public:
  explicit HttpExecutor(HttpExecutorOptions options);
  ~HttpExecutor() override;
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override;
  /// {"backends":["http"],"device":"http","engine_version":...}
  nlohmann::json Capabilities() const override;

  /// Counters since construction (readable from any thread, for tests and logs).
  struct Stats {
    int64_t requests = 0;          // completion requests sent
    int64_t retries = 0;           // requests repeated after a retryable failure
    int64_t transport_errors = 0;  // no usable answer: connection errors, cut-short responses
    int64_t server_errors = 0;     // 5xx, 408, 429
    int64_t malformed = 0;         // 200 with a body that is not a completion
    int64_t timeouts = 0;
    int64_t health_checks = 0;  // readiness probes sent while waiting for a server
  };
  Stats stats() const;

 private:
  Result<JobResult> Run(const JobSpec& spec, const std::string& key, int attempt);
  void Log(const std::string& line) const;

  HttpExecutorOptions options_;
  std::atomic<int64_t> requests_{0}, retries_{0}, transport_errors_{0}, server_errors_{0},
      malformed_{0}, timeouts_{0}, health_checks_{0};
};

/// The executor `nw run` gives every worker slot: http jobs go to an HttpExecutor, every other
/// backend to an EngineExecutor. Advertises the engine's backends plus "http".
class BackendRouter final : public JobExecutor {
 public:
  BackendRouter(EngineExecutorOptions engine, HttpExecutorOptions http);
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override;
  nlohmann::json Capabilities() const override;

 private:
  EngineExecutor engine_;
  HttpExecutor http_;
};

/// Rebuilds the engine's probes from indexer top-k sets as a server returns them: `topk` holds
/// (rows, layers, width) entry ids row-major, one row per position 0 .. rows-1, each row in rank
/// order and -1 padded. For each layer (a ratio-4 layer; `layer_ids` names them) and each
/// position t >= query_begin it fills in_topk (a selected entry covers [needle_begin,
/// needle_end)) and needle_rank: the best rank of a covering entry among the selected ones, or
/// `width` (a lower bound: the engine would report a rank >= width) when one is visible but none
/// was selected, or -1 when none is visible yet. Scores are not known (NaN).
std::vector<IndexerProbe> ProbesFromIndexerTopk(std::span<const int32_t> topk, int64_t rows,
                                                int width, std::span<const int> layer_ids,
                                                int64_t needle_begin, int64_t needle_end,
                                                int64_t query_begin);

}  // namespace nw
