#include "http/batch_scheduler.h"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace nw {

// A job admitted to the active set.
struct BatchScheduler::Active {
  std::shared_ptr<BatchJob> job;
  ServeRequest request;
  std::unique_ptr<ServeGeneration> gen;
  Status failed;         // set when the request failed; it is answered with this error
  int64_t reported = 0;  // tokens generated when Progress last ran
  bool retired = false;  // answered (or dropped) and out of the admission count
};

Result<std::unique_ptr<BatchScheduler>> BatchScheduler::Start(ServeModel* model,
                                                              BatchSchedulerOptions options) {
  if (model == nullptr) return Status::InvalidArgument("scheduler: no model");
  if (options.max_queued < 1) return Status::InvalidArgument("--max-batch must be >= 1");
  if (options.max_running < 1) {
    return Status::InvalidArgument("--max-running-requests must be >= 1");
  }
  if (options.max_batched_tokens <= options.max_running) {
    return Status::InvalidArgument(
        "--max-batched-tokens must exceed --max-running-requests (a step decodes one token per "
        "running request and needs room for prompt tokens)");
  }
  return std::make_unique<BatchScheduler>(Private{}, model, std::move(options));
}

BatchScheduler::BatchScheduler(Private, ServeModel* model, BatchSchedulerOptions options)
    : model_(model), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

BatchScheduler::~BatchScheduler() { Stop(); }

BatchScheduler::Admission BatchScheduler::Submit(std::shared_ptr<BatchJob> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Admission::kStopping;
    if (admitted_ >= options_.max_queued) return Admission::kFull;
    queue_.push_back(std::move(job));
    ++admitted_;
  }
  cv_.notify_one();
  return Admission::kQueued;
}

int BatchScheduler::admitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return admitted_;
}

BatchSchedulerStats BatchScheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BatchScheduler::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const auto& j : queue_) j->cancelled = true;
    for (const auto& j : active_jobs_) j->cancelled = true;
  }
  cv_.notify_all();
}

void BatchScheduler::Stop() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

void BatchScheduler::Loop() {
  std::vector<Active> active;
  // Leaves the active set (and the admission count); answered unless cancelled.
  auto retire = [&](Active& a) {
    a.retired = true;
    const bool cancelled = a.job->cancelled.load();
    {
      // Counted before the answer goes out, so a client that has its answer sees the counts.
      std::lock_guard<std::mutex> lock(mu_);
      --admitted_;
      ++(cancelled ? stats_.cancelled : stats_.finished);
      std::erase(active_jobs_, a.job);
    }
    if (cancelled) return;
    Result<ServeResult> result =
        a.failed.ok() ? Result<ServeResult>(a.gen->TakeResult()) : Result<ServeResult>(a.failed);
    try {
      a.job->Finish(a.request, std::move(result));
    } catch (const std::exception& e) {  // the job's edge: never let it end the server
      if (options_.log) options_.log(std::string("nw serve: answering failed: ") + e.what());
    }
  };
  auto fail = [&](Active& a, Status s) {
    if (a.failed.ok()) a.failed = std::move(s);
  };

  for (;;) {
    std::vector<std::shared_ptr<BatchJob>> admitting;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active.empty(); });
      if (stopping_) break;
      while (active.size() + admitting.size() < static_cast<size_t>(options_.max_running) &&
             !queue_.empty()) {
        admitting.push_back(std::move(queue_.front()));
        queue_.pop_front();
        active_jobs_.push_back(admitting.back());
      }
    }
    // 1. Admission.
    for (auto& job : admitting) {
      Active a;
      a.job = std::move(job);
      if (options_.before_generate && !a.job->cancelled) options_.before_generate();
      if (!a.job->cancelled) {
        try {
          Result<ServeRequest> r = a.job->Prepare();
          if (!r.ok()) {
            fail(a, r.status());
          } else {
            a.request = *std::move(r);
            auto gen = model_->Start(a.request);
            if (gen.ok()) {
              a.gen = *std::move(gen);
            } else {
              fail(a, gen.status());
            }
          }
        } catch (const std::exception& e) {
          fail(a, Status::Internal(std::string("internal error: ") + e.what()));
        }
      }
      active.push_back(std::move(a));
    }
    // 2. Cancelled and failed requests leave before the step.
    for (Active& a : active) {
      if (a.job->cancelled || !a.failed.ok()) retire(a);
    }
    std::erase_if(active, [](const Active& a) { return a.retired; });

    // 3. One batched decode step for every request past its prompt.
    std::vector<ServeGeneration*> decode;
    for (Active& a : active) {
      if (a.gen->decoding()) decode.push_back(a.gen.get());
    }
    if (!decode.empty()) {
      Status s;
      try {
        s = model_->DecodeStep(decode);
      } catch (const std::exception& e) {
        s = Status::Internal(std::string("internal error: ") + e.what());
      }
      if (!s.ok()) {
        if (options_.log) options_.log("nw serve: decode step failed: " + s.ToString());
        for (Active& a : active) {
          if (a.gen->decoding()) fail(a, s);
        }
      }
    }
    // 4. Prompt chunks with the rest of the budget, oldest request first.
    int64_t budget = options_.max_batched_tokens - static_cast<int64_t>(decode.size());
    int64_t chunks = 0, chunk_tokens = 0;
    for (Active& a : active) {
      if (budget <= 0) break;
      if (!a.failed.ok() || a.gen->prompt_left() == 0) continue;
      const int64_t n = std::min(budget, a.gen->prompt_left());
      Status s;
      try {
        s = a.gen->PrefillChunk(n);
      } catch (const std::exception& e) {
        s = Status::Internal(std::string("internal error: ") + e.what());
      }
      if (!s.ok()) fail(a, s);
      budget -= n;
      ++chunks;
      chunk_tokens += n;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.steps;
      if (!decode.empty()) {
        ++stats_.decode_steps;
        stats_.decoded_tokens += static_cast<int64_t>(decode.size());
        stats_.max_decode_batch =
            std::max(stats_.max_decode_batch, static_cast<int64_t>(decode.size()));
      }
      stats_.prefill_chunks += chunks;
      stats_.prefill_tokens += chunk_tokens;
    }
    // 5. Requests that gained tokens hear of them; finished (or failed) ones are answered and
    // leave.
    for (Active& a : active) {
      if (!a.failed.ok() || a.gen->finished() || a.job->cancelled ||
          a.gen->generated() == a.reported) {
        continue;
      }
      a.reported = a.gen->generated();
      try {
        a.job->Progress(*a.gen);
      } catch (const std::exception& e) {
        fail(a, Status::Internal(std::string("internal error: ") + e.what()));
      }
    }
    for (Active& a : active) {
      if (!a.failed.ok() || a.gen->finished()) retire(a);
    }
    std::erase_if(active, [](const Active& a) { return a.retired; });
  }
  // Stopping: every job was cancelled; none is answered.
  for (Active& a : active) retire(a);
  std::lock_guard<std::mutex> lock(mu_);
  admitted_ -= static_cast<int>(queue_.size());
  queue_.clear();
}

}  // namespace nw
