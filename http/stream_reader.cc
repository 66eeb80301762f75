#include "http/stream_reader.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace nw {

using json = nlohmann::json;

Status StreamReader::Feed(std::string_view bytes, Clock::time_point at) {
  pending_.clear();
  NW_RETURN_IF_ERROR(decoder_.Feed(bytes, &pending_));
  for (const std::string& data : pending_) NW_RETURN_IF_ERROR(Event(data, at));
  return Status::Ok();
}

Status StreamReader::Event(const std::string& data, Clock::time_point at) {
  auto bad = [](const std::string& what) {
    return Status::Corruption("malformed stream: " + what);
  };
  if (done_) return bad("an event after data: [DONE]");
  if (data == "[DONE]") {
    done_ = true;
    return Status::Ok();
  }
  const json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return bad("an event that is not a JSON object: " + data.substr(0, 80));
  if (auto e = chunk.find("error"); e != chunk.end()) {
    std::string message = e->dump();
    if (e->is_object()) {
      if (auto m = e->find("message"); m != e->end() && m->is_string())
        message = m->get<std::string>();
    }
    return Status::Unavailable("the stream ended with an error: " + message);
  }
  try {
    if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
      for (const char* key : {"prompt_tokens", "completion_tokens"}) {
        auto v = usage->find(key);
        if (v == usage->end() || v->is_null()) continue;
        if (!v->is_number_integer() || v->get<int64_t>() < 0) {
          return bad(std::string("usage.") + key + ": not a count");
        }
        (std::string_view(key) == "prompt_tokens" ? answer_.prompt_tokens
                                                  : answer_.completion_tokens) = v->get<int64_t>();
      }
    }
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array()) return bad("a chunk without choices");
    if (choices->empty()) return Status::Ok();  // the usage chunk
    const json& c = choices->front();
    if (!c.is_object()) return bad("choices[0]: not an object");
    std::string text;
    if (kind_ == ApiKind::kCompletions) {
      auto t = c.find("text");
      if (t == c.end() || !t->is_string()) return bad("choices[0].text: missing");
      text = t->get<std::string>();
    } else {
      auto d = c.find("delta");
      if (d == c.end() || !d->is_object()) return bad("choices[0].delta: missing");
      if (auto t = d->find("content"); t != d->end() && t->is_string()) {
        text = t->get<std::string>();
      } else if (t != d->end() && !t->is_null()) {
        return bad("choices[0].delta.content: not a string");
      }
    }
    bool finished = false;
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) {
      answer_.finish_reason = f->get<std::string>();
      finished = true;
    }
    if (text.empty() && !finished) return Status::Ok();  // e.g. chat's first (role) chunk
    const double ms = std::chrono::duration<double, std::milli>(at - sent_).count();
    if (!text.empty() && first_text_ms_ < 0) first_text_ms_ = ms;
    answer_.text += text;
    event_ms_.push_back(ms);
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  return Status::Ok();
}

Result<ParsedCompletion> StreamReader::Finish() const {
  if (!done_) {
    return Status::Corruption(decoder_.pending() ? "malformed stream: it ends inside an event"
                                                 : "malformed stream: no data: [DONE] at its end");
  }
  return answer_;
}

StreamTiming StreamReader::Timing(int64_t completion_tokens) const {
  StreamTiming t;
  t.events = static_cast<int64_t>(event_ms_.size());
  if (event_ms_.empty()) return t;
  // An answer without text has no first token: its first event (the finish) stands in.
  const double first = first_text_ms_ >= 0 ? first_text_ms_ : event_ms_.front();
  t.ttft_ms = std::max(0.0, first);
  if (completion_tokens > 1) {
    t.tpot_ms =
        std::max(0.0, event_ms_.back() - first) / static_cast<double>(completion_tokens - 1);
  }
  std::vector<double> gaps;
  for (size_t i = 1; i < event_ms_.size(); ++i) {
    gaps.push_back(std::max(0.0, event_ms_[i] - event_ms_[i - 1]));
  }
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    // Nearest rank: the smallest gap with at least p of the gaps at or below it.
    auto rank = [&](double p) {
      const size_t r = static_cast<size_t>(std::ceil(p * static_cast<double>(gaps.size())));
      return gaps[std::clamp<size_t>(r, 1, gaps.size()) - 1];
    };
    t.itl_p50_ms = rank(0.50);
    t.itl_p95_ms = rank(0.95);
  }
  return t;
}

}  // namespace nw
