// HttpServer: `nw serve`, an OpenAI-compatible HTTP server over one ServeModel (Boost.Beast).
//
//   POST /v1/completions        prompt as text or token ids
//   POST /v1/chat/completions   messages, through RenderChatPrompt
//   GET  /v1/models             the one model served
//   GET  /v1/models/{id}        it, by id (404 for any other)
//   GET  /health                200 while the server runs
//
// Threads: one I/O thread runs every connection (an io_context owned by the server) and the
// BatchScheduler's thread runs the engine with continuous batching (batch_scheduler.h): up to
// max_running requests at once, their decode steps batched, prompts in chunks within
// max_batched_tokens per step. A request is admitted only while fewer than max_batch requests are
// queued or running; otherwise it is answered 503 at once. Every request has a deadline (timeout_ms
// from its arrival): past it the client gets 504 and the request leaves the batch at the next step;
// so does a request whose client hangs up. Bad requests get 4xx with OpenAI's error object;
// bodies above max_body_bytes get 413. Stop() cancels every request, closes the listener and
// every connection, then lets the step in progress end and joins both threads. docs/http.md
// describes the API and its extensions. Thread-safety: Start/Stop/accessors from any thread; Stop
// is idempotent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "http/batch_scheduler.h"
#include "http/serve_model.h"

namespace nw {

struct HttpServerOptions {
  std::string listen = "127.0.0.1:8000";  // host:port; port 0 picks a free one
  std::string model_name;                 // the model id served ("" = the model folder's name)
  int max_batch = 16;                     // requests queued or running; more get 503
  int max_running = 8;                    // requests run together (the decode batch)
  int64_t max_batched_tokens = 256;       // tokens per scheduler step (decode + prompt chunks)
  size_t max_body_bytes = 16 << 20;       // request bodies above this get 413
  int64_t timeout_ms = 600'000;           // per request, from arrival to answer (504 after)
  int64_t read_timeout_ms = 30'000;       // to receive a request; also the keep-alive idle time
  int max_connections = 256;              // open connections; more are answered 503 and closed
  bool allow_faults = false;              // admit requests naming a fault (docs/faults.md)
  std::string api_key;  // "" = none; else every route but /health needs "Authorization: Bearer
                        // KEY" (compared in constant time), 401 otherwise
  std::function<void(std::string_view)> access_log;  // one line per request (docs/http.md)
  std::function<void()> before_generate;      // scheduler thread, as each request is admitted
  std::function<void(std::string_view)> log;  // lifecycle and server errors (never bodies)
};

struct HttpServerStats {
  int64_t connections = 0;        // accepted
  int64_t requests = 0;           // HTTP requests read
  int64_t completions = 0;        // generations answered 200
  int64_t rejected_busy = 0;      // 503: queue full
  int64_t timed_out = 0;          // 504
  int64_t client_errors = 0;      // 4xx
  int64_t disconnected = 0;       // clients that hung up while their request ran
  BatchSchedulerStats scheduler;  // steps and batch sizes
};

class HttpServer {
 public:
  /// Binds `options.listen` and starts the threads. Errors: InvalidArgument for a bad listen
  /// address, Unavailable when it cannot be bound.
  static Result<std::unique_ptr<HttpServer>> Start(std::unique_ptr<ServeModel> model,
                                                   HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Stop();
  uint16_t port() const;
  /// "http://127.0.0.1:<port>".
  std::string url() const;
  const std::string& model_name() const;
  HttpServerStats stats() const;

  struct Impl;  // defined in server.cc
  explicit HttpServer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nw
