// BatchScheduler: continuous batching for `nw serve` (as sglang's and vLLM's schedulers, sized for
// a CPU engine). It owns a bounded queue of jobs and a thread that runs the model over a set of
// active requests, each with its own ServeGeneration (Sequence and KV caches; the weights are
// shared, read only).
//
// One scheduler step:
//   1. admit queued jobs, oldest first, while fewer than max_running are active (Prepare runs
//      then, on the scheduler thread: tokenizing, checks);
//   2. drop active jobs that were cancelled (deadline passed, client gone, server stopping);
//   3. one decode step for every active request past its prompt, batched (ServeModel::DecodeStep:
//      one pass over the weights for all of them);
//   4. prompt chunks, oldest request first, with the rest of the step's token budget
//      (max_batched_tokens minus the decode tokens), so a long prompt is spread over steps and
//      never stalls the decodes of the others for more than one chunk;
//   5. requests that gained tokens and go on hear of them (Progress: a stream sends them);
//      finished requests (stop token or string, max tokens, or an error) are answered (Finish)
//      and leave.
// Batching and chunking change no value: a greedy request's tokens are those it gets alone.
// Back-pressure: Submit refuses a job while max_queued jobs are queued or active.
// Thread-safety: Submit, Stop, admitted and stats from any thread; Prepare and Finish run on the
// scheduler thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "common/status.h"
#include "http/serve_model.h"

namespace nw {

struct BatchSchedulerOptions {
  int max_queued = 16;                        // jobs queued or active; more are refused
  int max_running = 8;                        // active requests (one decode batch at most this big)
  int64_t max_batched_tokens = 256;           // tokens per step: one per decoding request, the rest
                                              // for prompt chunks; must exceed max_running
  std::function<void()> before_generate;      // scheduler thread, as a job is admitted
  std::function<void(std::string_view)> log;  // failures (never request contents)
};

/// A request as the scheduler sees it; the server derives its task from it.
class BatchJob {
 public:
  virtual ~BatchJob() = default;
  /// On the scheduler thread when the job is admitted: the request to run, or the error to
  /// answer (then Finish gets it).
  virtual Result<ServeRequest> Prepare() = 0;
  /// On the scheduler thread, once, unless the job was cancelled: the answer, or why it failed.
  /// `request` is what Prepare returned (empty if Prepare failed).
  virtual void Finish(const ServeRequest& request, Result<ServeResult> result) = 0;
  /// On the scheduler thread after each step in which the job's generation gained tokens and is
  /// not finished yet (a streaming job sends them); Finish follows once it is.
  virtual void Progress(const ServeGeneration& /*generation*/) {}

  /// Set by anyone: the scheduler drops the job at its next step, without Finish.
  std::atomic<bool> cancelled{false};
};

struct BatchSchedulerStats {
  int64_t steps = 0;             // scheduler steps that ran something
  int64_t decode_steps = 0;      // batched decode steps
  int64_t decoded_tokens = 0;    // tokens run by decode steps (the sum of their batch sizes)
  int64_t max_decode_batch = 0;  // the largest decode batch so far
  int64_t prefill_chunks = 0;
  int64_t prefill_tokens = 0;
  int64_t finished = 0;   // jobs answered through Finish
  int64_t cancelled = 0;  // jobs dropped because cancelled
};

class BatchScheduler {
 public:
  /// Checks the options (InvalidArgument) and starts the scheduler thread. `model` must outlive
  /// the scheduler.
  static Result<std::unique_ptr<BatchScheduler>> Start(ServeModel* model,
                                                       BatchSchedulerOptions options);
  ~BatchScheduler();
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  enum class Admission { kQueued, kFull, kStopping };
  Admission Submit(std::shared_ptr<BatchJob> job);
  /// Jobs queued or active now.
  int admitted() const;
  BatchSchedulerStats stats() const;
  /// Cancels every queued and active job (no Finish for them) and refuses new ones; returns at
  /// once (the step in progress goes on).
  void Cancel();
  /// Cancel(), then waits for the step in progress to end and joins the thread. Idempotent.
  void Stop();

  struct Private {
    explicit Private() = default;
  };
  BatchScheduler(Private, ServeModel* model, BatchSchedulerOptions options);

 private:
  struct Active;
  void Loop();

  ServeModel* model_;
  BatchSchedulerOptions options_;
  mutable std::mutex mu_;  // guards queue_, admitted_, stopping_, stats_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<BatchJob>> queue_;
  std::vector<std::shared_ptr<BatchJob>> active_jobs_;  // for Stop to cancel
  int admitted_ = 0;
  bool stopping_ = false;
  BatchSchedulerStats stats_;
  std::thread thread_;
};

}  // namespace nw
