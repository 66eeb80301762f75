// SseDecoder: the client side of server-sent events (the WHATWG "event stream" format that
// OpenAI-compatible servers stream answers in), fed the body as it arrives in pieces of any size.
// Lines end in LF, CRLF or CR; "data:" lines accumulate (joined by LF) and a blank line
// dispatches the event; comment lines (":") and the fields event, id and retry are read and
// dropped, as an OpenAI stream does not use them. Thread-safety: one decoder per stream.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

class SseDecoder {
 public:
  explicit SseDecoder(size_t max_event_bytes = 64 << 20) : max_event_bytes_(max_event_bytes) {}

  /// Adds the next piece of the body; the data of every event it completes is appended to
  /// *events. ResourceExhausted when one line or event exceeds max_event_bytes.
  Status Feed(std::string_view bytes, std::vector<std::string>* events);

  /// True when the body ended in the middle of an event (data not yet dispatched).
  bool pending() const { return !line_.empty() || has_data_; }

 private:
  void Line(std::string_view line, std::vector<std::string>* events);

  size_t max_event_bytes_;
  std::string line_;  // the incomplete line so far
  std::string data_;  // the data of the event so far
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was CR: an LF next ends nothing
};

}  // namespace nw
