#include "http/openai.h"

#include <sodium.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

namespace nw {
namespace {

using json = nlohmann::json;

// The most alternatives "logprobs" may ask for (OpenAI's limit).
constexpr int64_t kMaxLogprobs = 20;

ApiError Invalid(std::string param, std::string message) {
  ApiError e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

ApiError Unsupported(const std::string& param, const std::string& what) {
  return Invalid(param, what + " is not supported by this server");
}

// The field, or nullptr when absent or null (null means "the default" in OpenAI's API).
const json* Get(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> ReadInt(const json& body, const char* key, int64_t lo, int64_t hi,
                                std::optional<int64_t>* out) {
  const json* v = Get(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return Invalid(key, std::string(key) + " must be an integer");
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (x < lo || x > hi) {
    return Invalid(key, std::string(key) + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + v->dump());
  }
  *out = x;
  return std::nullopt;
}

// Shortest text that reads back as the same double ("0", "2", "0.5").
std::string Num(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::optional<ApiError> ReadNumber(const json& body, const char* key, double lo, double hi,
                                   bool lo_open, double* out) {
  const json* v = Get(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return Invalid(key, std::string(key) + " must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
    return Invalid(key, std::string(key) + " must be in " + (lo_open ? "(" : "[") + Num(lo) + ", " +
                            Num(hi) + "], got " + v->dump());
  }
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const json& body, const char* key, bool* out) {
  const json* v = Get(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return Invalid(key, std::string(key) + " must be true or false");
  *out = v->get<bool>();
  return std::nullopt;
}

// A JSON array of token ids.
std::optional<ApiError> ReadIds(const json& v, const std::string& param, int64_t max_count,
                                std::vector<int32_t>* out) {
  if (static_cast<int64_t>(v.size()) > max_count) {
    return Invalid(param, param + " has " + std::to_string(v.size()) + " entries, more than " +
                              std::to_string(max_count));
  }
  out->clear();
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Invalid(param,
                     param + "[" + std::to_string(i) + "] must be a token id (an integer >= 0)");
    }
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

// Every field a request may carry; anything else is refused (400 naming it), as OpenAI does.
// Those this server does not implement are refused below when they ask for something.
constexpr std::string_view kCommonFields[] = {"model",
                                              "max_tokens",
                                              "min_tokens",
                                              "temperature",
                                              "top_p",
                                              "top_k",
                                              "n",
                                              "seed",
                                              "stop",
                                              "stop_token_ids",
                                              "ignore_eos",
                                              "stream",
                                              "stream_options",
                                              "logprobs",
                                              "logit_bias",
                                              "presence_penalty",
                                              "frequency_penalty",
                                              "repetition_penalty",
                                              "user",
                                              "return_indexer_topk",
                                              "return_meta_info",
                                              "index_topk",
                                              "precision",
                                              "fault"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "best_of", "suffix"};
constexpr std::string_view kChatFields[] = {
    "messages",    "max_completion_tokens", "top_logprobs", "response_format", "tools",
    "tool_choice", "parallel_tool_calls",   "store",        "metadata"};

std::optional<ApiError> RejectUnknown(const json& body, ApiKind kind) {
  for (const auto& [key, value] : body.items()) {
    auto in = [&](std::span<const std::string_view> list) {
      return std::find(list.begin(), list.end(), key) != list.end();
    };
    if (in(kCommonFields) ||
        (kind == ApiKind::kCompletions ? in(kCompletionFields) : in(kChatFields))) {
      continue;
    }
    return Invalid(key, "unrecognized request argument: " + key +
                            " (docs/http.md lists the fields this server takes)");
  }
  return std::nullopt;
}

// Fields that ask for something this server does not do.
std::optional<ApiError> RejectUnsupported(const json& body, ApiKind kind) {
  if (const json* v = Get(body, "n"); v != nullptr && !(v->is_number_integer() && *v == 1)) {
    return Unsupported("n", "n other than 1 (send one request per choice)");
  }
  if (const json* v = Get(body, "best_of"); v != nullptr && !(v->is_number_integer() && *v == 1)) {
    return Unsupported("best_of", "best_of other than 1");
  }
  if (kind == ApiKind::kChat) {
    if (const json* v = Get(body, "logprobs");
        v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
      return Unsupported("logprobs", "logprobs on chat completions (use /v1/completions)");
    }
    if (const json* v = Get(body, "top_logprobs"); v != nullptr && !(v->is_number() && *v == 0)) {
      return Unsupported("top_logprobs", "top_logprobs on chat completions (use /v1/completions)");
    }
    if (const json* v = Get(body, "response_format");
        v != nullptr &&
        !(v->is_object() && v->size() == 1 && v->contains("type") && (*v)["type"] == "text")) {
      return Unsupported("response_format", "response_format other than {\"type\": \"text\"}");
    }
    if (const json* v = Get(body, "tool_choice");
        v != nullptr && !(v->is_string() && *v == "none")) {
      return Unsupported("tool_choice", "tool_choice other than \"none\"");
    }
  }
  if (const json* v = Get(body, "suffix"); v != nullptr && !(v->is_string() && v->empty())) {
    return Unsupported("suffix", "suffix");
  }
  if (const json* v = Get(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty())) {
    return Unsupported("logit_bias", "logit_bias");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (const json* v = Get(body, key); v != nullptr && !(v->is_number() && *v == 0)) {
      return Unsupported(key, key);
    }
  }
  if (const json* v = Get(body, "repetition_penalty");
      v != nullptr && !(v->is_number() && *v == 1)) {
    return Unsupported("repetition_penalty", "repetition_penalty");
  }
  if (const json* v = Get(body, "tools"); v != nullptr && !(v->is_array() && v->empty())) {
    return Unsupported("tools", "tools");
  }
  // user, store, metadata and parallel_tool_calls are accepted and change nothing: nothing is
  // stored, and no tools run.
  if (const json* v = Get(body, "store"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return Unsupported("store", "store: true");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& body, const RequestLimits& limits,
                                      std::vector<ChatMessage>* out) {
  const json* v = Get(body, "messages");
  if (v == nullptr) return Invalid("messages", "messages is required");
  if (!v->is_array() || v->empty()) {
    return Invalid("messages", "messages must be a non-empty array");
  }
  if (static_cast<int>(v->size()) > limits.max_messages) {
    return Invalid("messages", "at most " + std::to_string(limits.max_messages) + " messages");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Invalid(p, p + " must be an object");
    const json* role = Get(m, "role");
    if (role == nullptr || !role->is_string()) return Invalid(p + ".role", p + ".role is required");
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant") {
      return Invalid(p + ".role", p + ".role must be system, user or assistant, got '" +
                                      role->get<std::string>() + "'");
    }
    const json* content = Get(m, "content");
    if (content == nullptr) {
      if (msg.role != "assistant") return Invalid(p + ".content", p + ".content is required");
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pp = p + ".content[" + std::to_string(k) + "]";
        const json* type = part.is_object() ? Get(part, "type") : nullptr;
        const json* text = part.is_object() ? Get(part, "text") : nullptr;
        if (type == nullptr || *type != "text" || text == nullptr || !text->is_string()) {
          return Invalid(pp, pp + " must be {\"type\": \"text\", \"text\": ...} (only text is "
                                  "supported)");
        }
        msg.content += text->get<std::string>();
      }
    } else {
      return Invalid(p + ".content", p + ".content must be a string or an array of text parts");
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, const RequestLimits& limits,
                                    CompletionRequest* out) {
  const json* v = Get(body, "prompt");
  if (v == nullptr) return Invalid("prompt", "prompt is required");
  const json* p = v;
  if (v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array())) {
    if (v->size() != 1) {
      return Invalid("prompt", "batched prompts are not supported; send one prompt per request");
    }
    p = &v->front();
  }
  if (p->is_string()) {
    if (p->get_ref<const std::string&>().empty()) return Invalid("prompt", "prompt is empty");
    out->prompt_text = p->get<std::string>();
    return std::nullopt;
  }
  if (p->is_array()) {
    if (p->empty()) return Invalid("prompt", "prompt is empty");
    return ReadIds(*p, "prompt", limits.max_prompt_tokens, &out->prompt_ids);
  }
  return Invalid("prompt", "prompt must be a string or an array of token ids");
}

}  // namespace

json ApiError::Body() const {
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::optional<ApiError> ParseCompletionRequest(const json& body, ApiKind kind,
                                               const RequestLimits& limits,
                                               CompletionRequest* out) {
  try {
    if (!body.is_object()) return Invalid("", "the request body must be a JSON object");
    CompletionRequest r;
    r.kind = kind;
    if (auto e = RejectUnknown(body, kind)) return e;
    if (auto e = RejectUnsupported(body, kind)) return e;
    if (const json* m = Get(body, "model")) {
      if (!m->is_string()) return Invalid("model", "model must be a string");
      r.model = m->get<std::string>();
    }
    if (kind == ApiKind::kCompletions) {
      if (auto e = ParsePrompt(body, limits, &r)) return e;
    } else {
      if (auto e = ParseMessages(body, limits, &r.messages)) return e;
    }
    if (kind == ApiKind::kCompletions) {
      if (auto e = ReadBool(body, "echo", &r.echo)) return e;
      std::optional<int64_t> logprobs;
      if (const json* v = Get(body, "logprobs"); v != nullptr && v->is_boolean()) {
        if (v->get<bool>()) return Invalid("logprobs", "logprobs must be an integer (top N)");
      } else if (auto e = ReadInt(body, "logprobs", 0, kMaxLogprobs, &logprobs)) {
        return e;
      }
      if (logprobs) r.logprobs = static_cast<int>(*logprobs);
    }
    std::optional<int64_t> max_tokens;
    // max_tokens 0 scores the prompt alone: echo with logprobs (as OpenAI's legacy API).
    const int min_max_tokens = r.echo && r.logprobs >= 0 ? 0 : 1;
    if (auto e = ReadInt(body, "max_tokens", min_max_tokens, limits.max_tokens, &max_tokens)) {
      return e;
    }
    if (kind == ApiKind::kChat && !max_tokens) {
      if (auto e = ReadInt(body, "max_completion_tokens", 1, limits.max_tokens, &max_tokens)) {
        return e;
      }
    }
    if (max_tokens) r.max_tokens = static_cast<int>(*max_tokens);
    std::optional<int64_t> min_tokens;
    if (auto e = ReadInt(body, "min_tokens", 0, limits.max_tokens, &min_tokens)) return e;
    if (min_tokens) r.min_tokens = static_cast<int>(*min_tokens);
    if (max_tokens && r.min_tokens > *max_tokens) {
      return Invalid("min_tokens", "min_tokens must not exceed max_tokens");
    }
    if (auto e = ReadNumber(body, "temperature", 0, 2, false, &r.temperature)) return e;
    if (auto e = ReadNumber(body, "top_p", 0, 1, true, &r.top_p)) return e;
    std::optional<int64_t> top_k;
    if (auto e = ReadInt(body, "top_k", -1, 1 << 20, &top_k)) return e;
    if (top_k && *top_k > 0) r.top_k = static_cast<int>(*top_k);
    if (auto e = ReadBool(body, "stream", &r.stream)) return e;
    if (const json* so = Get(body, "stream_options")) {
      if (!so->is_object()) return Invalid("stream_options", "stream_options must be an object");
      if (!r.stream) {
        return Invalid("stream_options", "stream_options is only allowed with stream: true");
      }
      for (const auto& [key, value] : so->items()) {
        if (key != "include_usage" && key != "continuous_usage_stats") {
          return Invalid("stream_options." + key,
                         "unrecognized request argument: stream_options." + key);
        }
        if (key == "continuous_usage_stats" && !(value.is_boolean() && !value.get<bool>())) {
          return Unsupported("stream_options.continuous_usage_stats", "continuous_usage_stats");
        }
      }
      if (auto e = ReadBool(*so, "include_usage", &r.include_usage)) {
        e->param = "stream_options.include_usage";
        return e;
      }
    }
    if (r.stream && r.logprobs >= 0) {
      return Unsupported("logprobs", "logprobs with stream: true");
    }
    if (r.stream && r.echo) return Unsupported("echo", "echo with stream: true");
    if (const json* s = Get(body, "seed")) {
      if (!s->is_number_integer()) return Invalid("seed", "seed must be an integer");
      r.seed =
          s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
    }
    if (const json* s = Get(body, "stop")) {
      std::vector<json> items;
      if (s->is_string()) {
        items.push_back(*s);
      } else if (s->is_array()) {
        items.assign(s->begin(), s->end());
      } else {
        return Invalid("stop", "stop must be a string or an array of strings");
      }
      if (static_cast<int>(items.size()) > limits.max_stop) {
        return Invalid("stop", "at most " + std::to_string(limits.max_stop) + " stop strings");
      }
      for (const json& it : items) {
        if (!it.is_string() || it.get_ref<const std::string&>().empty()) {
          return Invalid("stop", "stop strings must be non-empty strings");
        }
        if (it.get_ref<const std::string&>().size() > limits.max_stop_bytes) {
          return Invalid("stop", "a stop string may be at most " +
                                     std::to_string(limits.max_stop_bytes) + " bytes");
        }
        r.stop.push_back(it.get<std::string>());
      }
    }
    if (const json* s = Get(body, "stop_token_ids")) {
      if (!s->is_array()) return Invalid("stop_token_ids", "stop_token_ids must be an array");
      if (auto e = ReadIds(*s, "stop_token_ids", limits.max_stop, &r.stop_token_ids)) return e;
    }
    if (auto e = ReadBool(body, "ignore_eos", &r.ignore_eos)) return e;
    if (auto e = ReadBool(body, "return_indexer_topk", &r.return_indexer_topk)) return e;
    if (auto e = ReadBool(body, "return_meta_info", &r.return_meta_info)) return e;
    std::optional<int64_t> index_topk;
    if (auto e = ReadInt(body, "index_topk", 1, 1 << 20, &index_topk)) return e;
    if (index_topk) r.index_topk = static_cast<int>(*index_topk);
    if (const json* p = Get(body, "precision")) {
      Result<PrecisionProfile> profile = p->is_string()
                                             ? NamedPrecisionProfile(p->get<std::string>())
                                             : PrecisionProfile::FromJson(*p);
      if (!profile.ok()) return Invalid("precision", "precision: " + profile.status().message());
      if (Status s = profile->Validate(); !s.ok()) {
        return Invalid("precision", "precision: " + s.message());
      }
      r.precision = *profile;
    }
    if (const json* f = Get(body, "fault")) {
      if (!f->is_string()) return Invalid("fault", "fault must be a string (docs/faults.md)");
      Result<Fault> fault = ParseFault(f->get<std::string>());
      if (!fault.ok()) return Invalid("fault", "fault: " + fault.status().message());
      r.fault = *fault;
    }
    *out = std::move(r);
    return std::nullopt;
  } catch (const json::exception& e) {
    return Invalid("", std::string("malformed request: ") + e.what());
  }
}

std::string RenderChatPrompt(const std::vector<ChatMessage>& messages) {
  if (messages.size() == 1 && messages[0].role == "user") return messages[0].content;
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string role = m.role == "system" ? "System"
                             : m.role == "user" ? "User"
                                                : "Assistant";
    out += role + ": " + m.content + "\n";
  }
  out += "Assistant:";
  return out;
}

json CompletionResponse(ApiKind kind, const std::string& id, int64_t created_s,
                        const std::string& model, const CompletionOutput& out) {
  json choice{{"index", 0}, {"logprobs", out.logprobs}, {"finish_reason", out.finish_reason}};
  if (kind == ApiKind::kCompletions) {
    choice["text"] = out.text;
  } else {
    choice["message"] = json{{"role", "assistant"}, {"content", out.text}};
  }
  if (!out.matched_stop.is_null()) choice["matched_stop"] = out.matched_stop;
  if (!out.meta_info.is_null()) choice["meta_info"] = out.meta_info;
  return json{{"id", id},
              {"object", kind == ApiKind::kCompletions ? "text_completion" : "chat.completion"},
              {"created", created_s},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage",
               {{"prompt_tokens", out.prompt_tokens},
                {"completion_tokens", out.completion_tokens},
                {"total_tokens", out.prompt_tokens + out.completion_tokens}}}};
}

json StreamChunk(ApiKind kind, const std::string& id, int64_t created_s, const std::string& model,
                 const json& text, bool first, const json& finish_reason, bool include_usage) {
  json choice{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (kind == ApiKind::kCompletions) {
    choice["text"] = text.is_null() ? json("") : text;
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.is_null()) delta["content"] = text;
    choice["delta"] = std::move(delta);
  }
  json chunk{
      {"id", id},
      {"object", kind == ApiKind::kCompletions ? "text_completion" : "chat.completion.chunk"},
      {"created", created_s},
      {"model", model},
      {"choices", json::array({std::move(choice)})}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json StreamUsageChunk(ApiKind kind, const std::string& id, int64_t created_s,
                      const std::string& model, int64_t prompt_tokens, int64_t completion_tokens) {
  return json{
      {"id", id},
      {"object", kind == ApiKind::kCompletions ? "text_completion" : "chat.completion.chunk"},
      {"created", created_s},
      {"model", model},
      {"choices", json::array()},
      {"usage",
       {{"prompt_tokens", prompt_tokens},
        {"completion_tokens", completion_tokens},
        {"total_tokens", prompt_tokens + completion_tokens}}}};
}

std::string SseEvent(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

Result<ParsedCompletion> ParseCompletionResponse(const json& body, ApiKind kind) {
  auto bad = [](const std::string& what) {
    return Status::Corruption("malformed completion response: " + what);
  };
  try {
    if (!body.is_object()) return bad("not a JSON object");
    auto choices = body.find("choices");
    if (choices == body.end() || !choices->is_array() || choices->empty()) {
      return bad("choices: missing or empty");
    }
    const json& c = choices->front();
    if (!c.is_object()) return bad("choices[0]: not an object");
    ParsedCompletion p;
    if (kind == ApiKind::kCompletions) {
      auto text = c.find("text");
      if (text == c.end() || !text->is_string()) return bad("choices[0].text: missing");
      p.text = text->get<std::string>();
    } else {
      auto msg = c.find("message");
      if (msg == c.end() || !msg->is_object()) return bad("choices[0].message: missing");
      auto content = msg->find("content");
      if (content != msg->end() && content->is_string()) {
        p.text = content->get<std::string>();
      } else if (content != msg->end() && !content->is_null()) {
        return bad("choices[0].message.content: not a string");
      }
    }
    auto finish = c.find("finish_reason");
    if (finish != c.end() && finish->is_string()) p.finish_reason = finish->get<std::string>();
    if (auto usage = body.find("usage"); usage != body.end() && usage->is_object()) {
      for (const char* key : {"prompt_tokens", "completion_tokens"}) {
        auto v = usage->find(key);
        if (v == usage->end() || v->is_null()) continue;
        if (!v->is_number_integer() || v->get<int64_t>() < 0) {
          return bad(std::string("usage.") + key + ": not a count");
        }
        (std::string_view(key) == "prompt_tokens" ? p.prompt_tokens : p.completion_tokens) =
            v->get<int64_t>();
      }
    }
    if (auto m = c.find("meta_info"); m != c.end() && m->is_object()) {
      p.meta_info = *m;
    } else if (auto top = body.find("meta_info"); top != body.end() && top->is_object()) {
      p.meta_info = *top;
    }
    return p;
  } catch (const json::exception& e) {
    return bad(e.what());
  }
}

// Base64 through libsodium (the original alphabet; padding written, and optional when read).
std::string Base64Encode(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return "";
  constexpr int kVariant = sodium_base64_VARIANT_ORIGINAL;
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), kVariant), '\0');
  sodium_bin2base64(out.data(), out.size(), bytes.data(), bytes.size(), kVariant);
  out.resize(out.size() - 1);  // the terminating NUL sodium writes
  return out;
}

Result<std::vector<uint8_t>> Base64Decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return Status::Corruption("base64: bad length");
  std::vector<uint8_t> out(text.size() * 3 / 4);
  size_t written = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), /*ignore=*/nullptr,
                        &written, &end, sodium_base64_VARIANT_ORIGINAL_NO_PADDING) != 0 ||
      end != text.data() + text.size()) {
    return Status::Corruption("base64: invalid character");
  }
  out.resize(written);
  return out;
}

std::string EncodeInt32Base64(std::span<const int32_t> values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(values[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + static_cast<size_t>(b)] = (v >> (8 * b)) & 0xff;
  }
  return Base64Encode(bytes);
}

Result<std::vector<int32_t>> DecodeInt32Base64(std::string_view text) {
  NW_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Base64Decode(text));
  if (bytes.size() % 4 != 0) return Status::Corruption("int32 base64: length not a multiple of 4");
  std::vector<int32_t> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= uint32_t{bytes[4 * i + static_cast<size_t>(b)]} << (8 * b);
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

}  // namespace nw
