// The OpenAI-compatible wire format shared by `nw serve` (HttpServer) and the http campaign
// backend (HttpExecutor): request parsing and validation, responses, the OpenAI error object,
// the chat template of needlework's own models, and sglang's indexer top-k encoding.
// Pure functions over JSON values; no networking here. docs/http.md describes the API.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/fault.h"
#include "engine/precision.h"

namespace nw {

/// An error to answer a request with: the HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";  // invalid_request_error, not_found_error,
                                               // server_error, timeout_error, overloaded_error
  std::string message;
  std::string param;  // the request field at fault ("" = none)
  std::string code;   // machine-readable reason ("" = null), e.g. "model_not_found"

  /// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
  nlohmann::json Body() const;
};

enum class ApiKind { kCompletions, kChat };

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

/// Server-side bounds applied while parsing a request.
struct RequestLimits {
  int64_t max_prompt_tokens = 1 << 20;  // token ids in a prompt array
  int max_tokens = 4096;                // max_tokens (the model's context bounds it further)
  int max_stop = 16;                    // entries in stop / stop_token_ids
  size_t max_stop_bytes = 256;          // bytes of one stop string
  int max_messages = 256;
};

/// A /v1/completions or /v1/chat/completions request body, validated.
struct CompletionRequest {
  ApiKind kind = ApiKind::kCompletions;
  std::string model;                       // "" when not given
  std::optional<std::string> prompt_text;  // completions: "prompt" as a string
  std::vector<int32_t> prompt_ids;         // completions: "prompt" as token ids
  std::vector<ChatMessage> messages;       // chat
  std::optional<int> max_tokens;  // "max_tokens" (chat also "max_completion_tokens"); unset:
                                  // completions 16, chat the rest of the context
  int min_tokens = 0;             // vLLM extension: no stop token before this many
  double temperature = 1.0;       // 0 = greedy (OpenAI's default is 1)
  double top_p = 1.0;
  int top_k = 0;                        // vLLM/sglang extension: 0 or -1 = off
  bool stream = false;                  // server-sent events
  bool include_usage = false;           // stream_options.include_usage
  int logprobs = -1;                    // completions: "logprobs" N >= 0 (top N); -1 = none
  bool echo = false;                    // completions: the prompt precedes the text (and logprobs)
  std::optional<uint64_t> seed;         // sampling seed
  std::vector<std::string> stop;        // stop strings (not part of the returned text)
  std::vector<int32_t> stop_token_ids;  // vLLM/sglang extension
  bool ignore_eos = false;              // vLLM/sglang extension
  bool return_indexer_topk = false;     // sglang extension (meta_info.indexer_topk)
  bool return_meta_info = false;        // sglang extension (choices[i].meta_info)
  std::optional<int> index_topk;        // needlework extension: the indexer top-k
  std::optional<PrecisionProfile> precision;  // needlework extension: number formats
  std::optional<Fault> fault;  // needlework extension: known-bug replay (docs/faults.md); the
                               // server refuses one unless started with --allow-faults
};

/// Parses and validates a request body. Every field is either honoured or refused: fields this
/// server does not implement are refused when they ask for something (n > 1, best_of > 1,
/// suffix, logit_bias, penalties, tools, response_format other than text, chat logprobs), and
/// unknown fields are refused (400 naming the field), as OpenAI does. Returns the error to
/// answer with, or nullopt with *out filled.
std::optional<ApiError> ParseCompletionRequest(const nlohmann::json& body, ApiKind kind,
                                               const RequestLimits& limits, CompletionRequest* out);

/// The prompt `nw serve` builds from chat messages for needlework's models (they have no chat
/// training): a single user message is its content as is; otherwise each message becomes
/// "<Role>: <content>\n" (System, User, Assistant) followed by "Assistant:".
std::string RenderChatPrompt(const std::vector<ChatMessage>& messages);

/// What one generation produced, for a response.
struct CompletionOutput {
  std::string text;             // without the stop token / stop string
  std::string finish_reason;    // stop | length
  nlohmann::json matched_stop;  // the stop token id or string that ended it, else null
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // the stop token included, as vLLM counts
  nlohmann::json meta_info;       // null, or the choice's meta_info object
  nlohmann::json logprobs;        // null, or the choice's logprobs object
};

/// The response body: "text_completion" with choices[0].text, or "chat.completion" with
/// choices[0].message; usage with prompt/completion/total tokens; meta_info in the choice when
/// not null; `logprobs` (null when not asked for) in the choice.
nlohmann::json CompletionResponse(ApiKind kind, const std::string& id, int64_t created_s,
                                  const std::string& model, const CompletionOutput& out);

/// One chunk of a streamed answer ("text_completion" or "chat.completion.chunk"): one choice with
/// `text` (completions) or `delta` (chat: `role` when `first`, `content` when `text` is not
/// null), and finish_reason (null while streaming). With include_usage, "usage": null.
nlohmann::json StreamChunk(ApiKind kind, const std::string& id, int64_t created_s,
                           const std::string& model, const nlohmann::json& text, bool first,
                           const nlohmann::json& finish_reason, bool include_usage);
/// The last chunk with include_usage: no choices, the usage of the whole request.
nlohmann::json StreamUsageChunk(ApiKind kind, const std::string& id, int64_t created_s,
                                const std::string& model, int64_t prompt_tokens,
                                int64_t completion_tokens);
/// One server-sent event: "data: <json>\n\n" (invalid UTF-8 replaced by U+FFFD).
std::string SseEvent(const nlohmann::json& data);
/// The end of a stream, as OpenAI sends it.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

/// A response as the client reads it.
struct ParsedCompletion {
  std::string text;
  std::string finish_reason;
  std::optional<int64_t> prompt_tokens;  // usage, when the server reports it
  std::optional<int64_t> completion_tokens;
  nlohmann::json meta_info;  // choices[0].meta_info, else the top-level meta_info, else null
};

/// Reads a completion response body. Errors (Corruption) name the missing or mistyped field.
Result<ParsedCompletion> ParseCompletionResponse(const nlohmann::json& body, ApiKind kind);

/// Standard base64 with padding (libsodium's).
std::string Base64Encode(std::span<const uint8_t> bytes);
/// Accepts standard base64 with or without padding; Corruption on anything else, including
/// a last character whose unused bits are not zero (RFC 4648 section 3.5: not canonical).
Result<std::vector<uint8_t>> Base64Decode(std::string_view text);

/// sglang's indexer_topk encoding: int32 little-endian, base64.
std::string EncodeInt32Base64(std::span<const int32_t> values);
Result<std::vector<int32_t>> DecodeInt32Base64(std::string_view text);

}  // namespace nw
