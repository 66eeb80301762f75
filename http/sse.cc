#include "http/sse.h"

namespace nw {

void SseDecoder::Line(std::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {  // dispatch
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;  // event, id, retry and unknown fields: not used by OpenAI streams
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

Status SseDecoder::Feed(std::string_view bytes, std::vector<std::string>* events) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == start && line_.empty()) {  // the LF of a CRLF
      after_cr_ = false;
      start = i + 1;
      continue;
    }
    line_.append(bytes.substr(start, i - start));
    Line(line_, events);
    line_.clear();
    after_cr_ = c == '\r';
    start = i + 1;
  }
  line_.append(bytes.substr(start));
  if (line_.size() + data_.size() > max_event_bytes_) {
    return Status::ResourceExhausted("a server-sent event is longer than " +
                                     std::to_string(max_event_bytes_) + " bytes");
  }
  return Status::Ok();
}

}  // namespace nw
