// The OpenAI wire format (http/openai.h) and the probe rebuild from indexer top-k sets: request
// validation, responses both ways, the chat template, base64 and sglang's int32 encoding.
#include "http/openai.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "http/http_executor.h"

namespace nw {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

CompletionRequest Parse(const json& body, ApiKind kind = ApiKind::kCompletions) {
  CompletionRequest r;
  auto e = ParseCompletionRequest(body, kind, RequestLimits{}, &r);
  EXPECT_FALSE(e.has_value()) << body.dump() << " -> " << (e ? e->message : "");
  return r;
}

ApiError Reject(const json& body, ApiKind kind = ApiKind::kCompletions) {
  CompletionRequest r;
  RequestLimits limits;
  limits.max_tokens = 1000;
  auto e = ParseCompletionRequest(body, kind, limits, &r);
  EXPECT_TRUE(e.has_value()) << body.dump() << " was accepted";
  return e.value_or(ApiError{});
}

TEST(OpenAiTest, Base64MatchesRfc4648) {
  auto enc = [](std::string_view s) {
    return Base64Encode(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_EQ(enc(""), "");
  EXPECT_EQ(enc("f"), "Zg==");
  EXPECT_EQ(enc("fo"), "Zm8=");
  EXPECT_EQ(enc("foo"), "Zm9v");
  EXPECT_EQ(enc("foob"), "Zm9vYg==");
  EXPECT_EQ(enc("fooba"), "Zm9vYmE=");
  EXPECT_EQ(enc("foobar"), "Zm9vYmFy");
  for (std::string_view text : {"Zm9vYmE=", "Zm9vYmE", "Zm9vYmFy"}) {
    auto d = Base64Decode(text);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(std::string(d->begin(), d->end()).substr(0, 5), "fooba");
  }
  EXPECT_FALSE(Base64Decode("Zm9v!").ok());
  EXPECT_FALSE(Base64Decode("Z").ok());
  EXPECT_FALSE(Base64Decode("Zh").ok());  // "Zg" with nonzero unused bits: not canonical
  auto one = Base64Decode("Zg");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(std::string(one->begin(), one->end()), "f");
}

TEST(OpenAiTest, Int32Base64IsLittleEndian) {
  const std::vector<int32_t> v = {
      1, -1, 0, 258, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const std::string b64 = EncodeInt32Base64(v);
  const uint8_t one[] = {1, 0, 0, 0};
  EXPECT_EQ(b64.substr(0, 5), Base64Encode(one).substr(0, 5));  // 30 bits: the first int
  auto back = DecodeInt32Base64(b64);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, v);
  EXPECT_FALSE(DecodeInt32Base64(Base64Encode(std::vector<uint8_t>{1, 2, 3})).ok());
}

TEST(OpenAiTest, CompletionRequestsAndDefaults) {
  CompletionRequest r = Parse(json{{"prompt", "hello"}});
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_FALSE(r.max_tokens.has_value());  // the server picks: 16, or chat's rest of context
  EXPECT_EQ(r.temperature, 1.0);           // OpenAI's default
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.top_p, 1.0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_FALSE(r.return_indexer_topk);

  r = Parse(json{{"model", "m"},
                 {"prompt", {5, 6, 7}},
                 {"max_tokens", 3},
                 {"temperature", 0},
                 {"top_p", 0.5},
                 {"seed", 9},
                 {"stop", "\n"},
                 {"stop_token_ids", {2}},
                 {"ignore_eos", true},
                 {"return_indexer_topk", true},
                 {"return_meta_info", true},
                 {"index_topk", 8},
                 {"precision", "fp8-index"},
                 {"stream", false},
                 {"n", 1},
                 {"logprobs", nullptr},
                 {"echo", false},
                 {"top_k", 4},
                 {"min_tokens", 2},
                 {"user", "u"}});
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_FALSE(r.prompt_text.has_value());
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.seed, 9u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(r.ignore_eos && r.return_indexer_topk && r.return_meta_info);
  EXPECT_EQ(r.index_topk, 8);
  EXPECT_EQ(r.top_k, 4);
  EXPECT_EQ(r.min_tokens, 2);
  ASSERT_TRUE(r.precision.has_value());
  EXPECT_EQ(r.precision->name, "fp8-index");

  // One-element batches are a single prompt; a precision profile may be given in full.
  EXPECT_EQ(Parse(json{{"prompt", {"x"}}}).prompt_text, "x");
  EXPECT_EQ(Parse(json{{"prompt", {{1, 2}}}}).prompt_ids, (std::vector<int32_t>{1, 2}));
  PrecisionProfile custom;
  custom.name = "mine";
  custom.index_k = NumFormat::kBf16;
  EXPECT_EQ(*Parse(json{{"prompt", "x"}, {"precision", custom.ToJson()}}).precision, custom);

  // Streaming, logprobs and echo.
  r = Parse(json{{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_TRUE(r.stream && r.include_usage);
  r = Parse(json{{"prompt", "x"}, {"logprobs", 5}, {"echo", true}, {"max_tokens", 0}});
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_EQ(Parse(json{{"prompt", "x"}, {"logprobs", false}}).logprobs, -1);
}

TEST(OpenAiTest, BadCompletionRequestsNameTheField) {
  struct Case {
    json body;
    std::string param;
    std::string message;
  };
  const std::vector<Case> cases = {
      {json::array(), "", "must be a JSON object"},
      {json::object(), "prompt", "prompt is required"},
      {json{{"prompt", ""}}, "prompt", "prompt is empty"},
      {json{{"prompt", json::array()}}, "prompt", "prompt is empty"},
      {json{{"prompt", {"a", "b"}}}, "prompt", "batched prompts are not supported"},
      {json{{"prompt", {1, -2}}}, "prompt", "prompt[1] must be a token id"},
      {json{{"prompt", {1, 2.5}}}, "prompt", "prompt[1] must be a token id"},
      {json{{"prompt", 5}}, "prompt", "must be a string or an array of token ids"},
      {json{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens", "must be in [1, 1000]"},
      {json{{"prompt", "x"}, {"max_tokens", 1001}}, "max_tokens", "must be in [1, 1000]"},
      {json{{"prompt", "x"}, {"max_tokens", "5"}}, "max_tokens", "must be an integer"},
      {json{{"prompt", "x"}, {"temperature", 2.5}}, "temperature", "must be in [0, 2]"},
      {json{{"prompt", "x"}, {"top_p", 0}}, "top_p", "must be in (0"},
      {json{{"prompt", "x"}, {"stop", {"a", ""}}}, "stop", "non-empty strings"},
      {json{{"prompt", "x"}, {"stop", 3}}, "stop", "a string or an array"},
      {json{{"prompt", "x"}, {"stream", 1}}, "stream", "true or false"},
      {json{{"prompt", "x"}, {"stream", true}, {"logprobs", 1}}, "logprobs", "not supported"},
      {json{{"prompt", "x"}, {"stream", true}, {"echo", true}}, "echo", "not supported"},
      {json{{"prompt", "x"}, {"n", 2}}, "n", "not supported"},
      {json{{"prompt", "x"}, {"logprobs", 21}}, "logprobs", "must be in [0, 20]"},
      {json{{"prompt", "x"}, {"logprobs", true}}, "logprobs", "must be an integer"},
      {json{{"prompt", "x"}, {"echo", true}, {"max_tokens", 0}}, "max_tokens",
       "must be in [1, 1000]"},
      {json{{"prompt", "x"}, {"something_else", 1}}, "something_else", "unrecognized"},
      {json{{"prompt", "x"}, {"top_logprobs", 2}}, "top_logprobs", "unrecognized"},
      {json{{"prompt", "x"}, {"top_k", -2}}, "top_k", "must be in [-1,"},
      {json{{"prompt", "x"}, {"best_of", 3}}, "best_of", "not supported"},
      {json{{"prompt", "x"}, {"logit_bias", {{"5", 1}}}}, "logit_bias", "not supported"},
      {json{{"prompt", "x"}, {"presence_penalty", 0.5}}, "presence_penalty", "not supported"},
      {json{{"prompt", "x"}, {"model", 3}}, "model", "must be a string"},
      {json{{"prompt", "x"}, {"seed", "s"}}, "seed", "must be an integer"},
      {json{{"prompt", "x"}, {"ignore_eos", 1}}, "ignore_eos", "true or false"},
      {json{{"prompt", "x"}, {"index_topk", 0}}, "index_topk", "must be in [1,"},
      {json{{"prompt", "x"}, {"precision", "fp7"}}, "precision", "precision:"},
  };
  for (const Case& c : cases) {
    ApiError e = Reject(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, c.param) << c.body.dump();
    EXPECT_THAT(e.message, HasSubstr(c.message)) << c.body.dump();
  }
}

TEST(OpenAiTest, ChatRequests) {
  CompletionRequest r = Parse(
      json{{"messages",
            {{{"role", "system"}, {"content", "be brief"}},
             {{"role", "user"},
              {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
             {{"role", "assistant"}, {"content", nullptr}}}},
           {"max_completion_tokens", 7}},
      ApiKind::kChat);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(RenderChatPrompt(r.messages), "System: be brief\nUser: ab\nAssistant: \nAssistant:");
  EXPECT_EQ(RenderChatPrompt({{"user", "just this"}}), "just this");

  EXPECT_THAT(Reject(json::object(), ApiKind::kChat).message, HasSubstr("messages is required"));
  EXPECT_EQ(Reject(json{{"messages", json::array()}}, ApiKind::kChat).param, "messages");
  EXPECT_EQ(
      Reject(json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, ApiKind::kChat).param,
      "messages[0].role");
  EXPECT_EQ(Reject(json{{"messages", {{{"role", "user"}}}}}, ApiKind::kChat).param,
            "messages[0].content");
  EXPECT_EQ(Reject(json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
                   ApiKind::kChat)
                .param,
            "messages[0].content[0]");
}

TEST(OpenAiTest, ErrorBodiesAreOpenAiShaped) {
  ApiError e;
  e.status = 404;
  e.message = "no such model";
  e.param = "model";
  e.code = "model_not_found";
  EXPECT_EQ(e.Body(), json::parse(R"({"error":{"message":"no such model","type":
      "invalid_request_error","param":"model","code":"model_not_found"}})"));
  ApiError bare;
  bare.message = "m";
  EXPECT_TRUE(bare.Body()["error"]["param"].is_null());
  EXPECT_TRUE(bare.Body()["error"]["code"].is_null());
}

TEST(OpenAiTest, ResponsesRoundTrip) {
  CompletionOutput out;
  out.text = " 123";
  out.finish_reason = "stop";
  out.matched_stop = 2;
  out.prompt_tokens = 10;
  out.completion_tokens = 3;
  for (ApiKind kind : {ApiKind::kCompletions, ApiKind::kChat}) {
    json body = CompletionResponse(kind, "id-1", 100, "tiny", out);
    EXPECT_EQ(body["object"], kind == ApiKind::kChat ? "chat.completion" : "text_completion");
    EXPECT_EQ(body["usage"]["total_tokens"], 13);
    EXPECT_FALSE(body["choices"][0].contains("meta_info"));
    auto p = ParseCompletionResponse(body, kind);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->text, " 123");
    EXPECT_EQ(p->finish_reason, "stop");
    EXPECT_EQ(p->prompt_tokens, 10);
    EXPECT_EQ(p->completion_tokens, 3);
    EXPECT_TRUE(p->meta_info.is_null());
  }
  out.meta_info = json{{"indexer_topk", "AQAAAA=="}};
  auto p = ParseCompletionResponse(CompletionResponse(ApiKind::kCompletions, "i", 1, "m", out),
                                   ApiKind::kCompletions);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->meta_info["indexer_topk"], "AQAAAA==");
  // sglang's native form: meta_info at the top level.
  auto top = ParseCompletionResponse(
      json{{"choices", {{{"text", "x"}}}}, {"meta_info", {{"indexer_topk", ""}}}},
      ApiKind::kCompletions);
  ASSERT_TRUE(top.ok());
  EXPECT_TRUE(top->meta_info.contains("indexer_topk"));
  EXPECT_FALSE(top->prompt_tokens.has_value());
  // Chat content may be null.
  auto null_content = ParseCompletionResponse(
      json{{"choices", {{{"message", {{"role", "assistant"}, {"content", nullptr}}}}}}},
      ApiKind::kChat);
  ASSERT_TRUE(null_content.ok());
  EXPECT_EQ(null_content->text, "");
}

TEST(OpenAiTest, MalformedResponsesAreCorruption) {
  for (const json& body :
       {json::array(), json::object(), json{{"choices", json::array()}}, json{{"choices", {1}}},
        json{{"choices", {{{"text", 5}}}}},
        json{{"choices", {{{"text", "x"}}}}, {"usage", {{"prompt_tokens", -1}}}},
        json{{"choices", {{{"text", "x"}}}}, {"usage", {{"completion_tokens", "3"}}}}}) {
    auto p = ParseCompletionResponse(body, ApiKind::kCompletions);
    ASSERT_FALSE(p.ok()) << body.dump();
    EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
    EXPECT_THAT(p.status().message(), HasSubstr("malformed completion response"));
  }
  EXPECT_FALSE(ParseCompletionResponse(json{{"choices", {{{"text", "x"}}}}}, ApiKind::kChat).ok());
}

// Ratio-4 entries: entry i pools tokens [4(i-1), 4(i+1)); visible to t when i < (t+1)/4. A
// needle at tokens [8, 10) is covered by entries 2 and 3.
TEST(OpenAiTest, ProbesFromIndexerTopkFollowTheEngineDefinitions) {
  const int64_t rows = 16;
  const int width = 2;
  std::vector<int32_t> sets(rows * width, -1);
  auto row = [&](int64_t t, int32_t a, int32_t b) {
    sets[static_cast<size_t>(t * width)] = a;
    sets[static_cast<size_t>(t * width + 1)] = b;
  };
  row(7, 1, 0);   // visible: 0, 1 -> the needle is not visible yet
  row(11, 0, 2);  // visible: 0..2 -> entry 2 covers it, selected at rank 1
  row(12, 3, 1);  // visible: 0..2 (13/4 = 3) -> entry 3 is not visible; 1 does not cover
  row(15, 0, 1);  // visible: 0..3 -> covering entries visible, none selected: rank >= width
  const std::vector<int> layers = {1};
  auto probes = ProbesFromIndexerTopk(sets, rows, width, layers, 8, 10, 7);
  ASSERT_EQ(probes.size(), 1u);
  const IndexerProbe& p = probes[0];
  EXPECT_EQ(p.layer, 1);
  EXPECT_EQ(p.topk, width);
  ASSERT_EQ(p.positions.size(), 9u);  // 7 .. 15
  EXPECT_EQ(p.positions.front(), 7);
  auto at = [&](int64_t t) { return static_cast<size_t>(t - 7); };
  EXPECT_EQ(p.needle_rank[at(7)], -1);
  EXPECT_EQ(p.in_topk[at(7)], 0);
  EXPECT_EQ(p.needle_rank[at(11)], 1);
  EXPECT_EQ(p.in_topk[at(11)], 1);
  EXPECT_EQ(p.needle_rank[at(12)], width);
  EXPECT_EQ(p.in_topk[at(12)], 0);
  EXPECT_EQ(p.needle_rank[at(15)], width);
  EXPECT_EQ(p.num_visible[at(15)], 4);
  EXPECT_TRUE(std::isnan(p.needle_score[at(11)]));
  EXPECT_EQ(p.topk_sets.size(), 9u * width);
  EXPECT_EQ(p.topk_sets[at(11) * width + 1], 2);

  ProbeSummary s = SummarizeProbe(p, 11);
  EXPECT_TRUE(s.in_topk_last);
  EXPECT_EQ(s.topk_last, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(s.needle_rank_min, 1);

  // Sizes that do not match the shape give nothing.
  EXPECT_TRUE(
      ProbesFromIndexerTopk(std::span(sets).first(5), rows, width, layers, 8, 10, 0).empty());
}

}  // namespace
}  // namespace nw
