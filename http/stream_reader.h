// StreamReader: reads a streamed (server-sent events) completion as the http backend receives
// it, and measures its latency. Each piece of the body is fed with the time it arrived; the
// events are OpenAI's stream chunks (docs/http.md, "Streaming"), ending with "data: [DONE]".
// Thread-safety: one reader per request.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/openai.h"
#include "http/sse.h"
#include "protocol/job.h"

namespace nw {

class StreamReader {
 public:
  using Clock = std::chrono::steady_clock;

  /// `sent`: when the request went out (the start of time to first token).
  StreamReader(ApiKind kind, Clock::time_point sent) : kind_(kind), sent_(sent) {}

  /// One piece of the body, received at `at`. Errors: Corruption for a chunk that is not JSON
  /// or not a completion chunk, or an event after [DONE]; Unavailable for an error event (the
  /// server failed mid-stream, e.g. its deadline); ResourceExhausted for an oversized event.
  Status Feed(std::string_view bytes, Clock::time_point at);

  /// The answer once the body has ended: text, finish_reason and usage (when the server sent
  /// the include_usage chunk). Corruption when the stream did not end with [DONE].
  Result<ParsedCompletion> Finish() const;

  /// The latency figures (protocol/job.h StreamTiming). `completion_tokens`: the answer's token
  /// count (usage, or the worker's own count), for the time per output token.
  StreamTiming Timing(int64_t completion_tokens) const;

  /// The milliseconds since `sent` at which each event with text or the finish reason arrived.
  const std::vector<double>& event_ms() const { return event_ms_; }

 private:
  Status Event(const std::string& data, Clock::time_point at);

  ApiKind kind_;
  Clock::time_point sent_;
  SseDecoder decoder_;
  std::vector<std::string> pending_;
  ParsedCompletion answer_;
  bool done_ = false;
  double first_text_ms_ = -1;  // the first event with text
  std::vector<double> event_ms_;
};

}  // namespace nw
