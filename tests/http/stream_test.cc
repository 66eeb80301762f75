// `nw serve`'s OpenAI surface beyond one plain completion: server-sent events streaming (the
// framing parsed event by event, as OpenAI sends it, for completions and chat, with and without
// include_usage, stop strings held back, a client that hangs up mid-stream cancelling its
// request), GET /v1/models/{id}, ids and `created`, logprobs and echo (lm-eval's loglikelihood
// requests), top_k and min_tokens, chat's default max_tokens, unknown fields refused, the API key
// and the access log. Over a random tiny checkpoint on loopback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "http/client.h"
#include "http/openai.h"
#include "http/server.h"
#include "tests/http/http_test_util.h"

namespace nw {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing_http::TempDir;
using testing_http::WaitFor;

// An event stream split into its events: each event's data lines joined ("data: " removed).
// Fails the test on anything OpenAI's framing would not produce: a line that is not "data: ...",
// an event after [DONE], or a stream that does not end with "data: [DONE]\n\n".
std::vector<std::string> ParseSse(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  bool done = false;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an event does not end with a blank line: " << body.substr(at);
      break;
    }
    const std::string event = body.substr(at, end - at);
    at = end + 2;
    EXPECT_FALSE(done) << "an event after [DONE]: " << event;
    std::string data;
    size_t line_start = 0;
    while (line_start <= event.size()) {
      size_t line_end = event.find('\n', line_start);
      if (line_end == std::string::npos) line_end = event.size();
      const std::string line = event.substr(line_start, line_end - line_start);
      EXPECT_TRUE(line.rfind("data: ", 0) == 0) << "not a data line: " << line;
      if (!data.empty()) data += "\n";
      data += line.substr(std::min<size_t>(6, line.size()));
      line_start = line_end + 1;
    }
    if (data == "[DONE]") done = true;
    events.push_back(data);
  }
  EXPECT_TRUE(done) << "the stream does not end with data: [DONE]";
  return events;
}

class StreamTest : public testing_http::TinyEngineSuite {
 protected:
  std::unique_ptr<HttpServer> Start(HttpServerOptions o = {},
                                    const std::filesystem::path& dir = {}) {
    auto model = ServeModel::Load(dir.empty() ? model_dir() : dir, "cpu");
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return nullptr;
    o.listen = "127.0.0.1:0";
    if (o.model_name.empty()) o.model_name = "tiny";
    auto server = HttpServer::Start(*std::move(model), std::move(o));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? *std::move(server) : nullptr;
  }
  static std::unique_ptr<HttpClient> Client(const HttpServer& s, HttpHeaders headers = {}) {
    auto url = HttpUrl::Parse(s.url());
    EXPECT_TRUE(url.ok());
    HttpClientOptions o;
    o.headers = std::move(headers);
    return std::make_unique<HttpClient>(*url, o);
  }
  static HttpResponse Raw(HttpClient& c, const std::string& path, const json& body) {
    auto r = c.Send(body.is_null() ? "GET" : "POST", path, body.is_null() ? "" : body.dump(),
                    std::chrono::seconds(120));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : HttpResponse{};
  }
  static std::pair<int, json> Call(HttpClient& c, const std::string& path, const json& body) {
    HttpResponse r = Raw(c, path, body);
    json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body;
    return {r.status, j};
  }
  // A streamed answer's events, parsed (the last one, "[DONE]", removed).
  static std::vector<json> Stream(HttpClient& c, const std::string& path, const json& body) {
    HttpResponse r = Raw(c, path, body);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["content-type"], "text/event-stream; charset=utf-8");
    EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
    std::vector<std::string> events = ParseSse(r.body);
    std::vector<json> out;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      json j = json::parse(events[i], nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << events[i];
      out.push_back(j);
    }
    return out;
  }
  static std::vector<int32_t> Prompt(int64_t length, uint64_t seed = 11) {
    NiahSpec ns;
    ns.context_length = length;
    ns.seed = seed;
    auto p = BuildNiahPrompt(engine_->tokenizer(), ns);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? p->tokens : std::vector<int32_t>{};
  }
};

TEST_F(StreamTest, StreamedCompletionsFrameAsOpenAIAndEqualTheWholeAnswer) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  const json base{
      {"prompt", Prompt(200)}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  auto [status, whole] = Call(*client, "/v1/completions", base);
  ASSERT_EQ(status, 200) << whole.dump();

  json streamed_req = base;
  streamed_req["stream"] = true;
  streamed_req["stream_options"] = {{"include_usage", true}};
  const std::vector<json> chunks = Stream(*client, "/v1/completions", streamed_req);
  ASSERT_GE(chunks.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const json& c = chunks[i];
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["id"], chunks[0]["id"]);
    EXPECT_EQ(c["model"], "tiny");
    EXPECT_TRUE(c["created"].is_number_integer());
    ASSERT_TRUE(c.contains("usage"));
    EXPECT_TRUE(c["usage"].is_null());  // include_usage: null until the last chunk
    ASSERT_EQ(c["choices"].size(), 1u);
    EXPECT_EQ(c["choices"][0]["index"], 0);
    text += c["choices"][0]["text"].get<std::string>();
    // finish_reason is null except on the last chunk with a choice.
    EXPECT_EQ(c["choices"][0]["finish_reason"].is_null(), i + 2 < chunks.size()) << c.dump();
  }
  // Tokens came in several events, not as one.
  EXPECT_GE(chunks.size(), 4u);
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  const json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"], whole["usage"]);
  EXPECT_NE(chunks[0]["id"], whole["id"]);

  // Without include_usage there is no usage field at all.
  json plain = base;
  plain["stream"] = true;
  const std::vector<json> no_usage = Stream(*client, "/v1/completions", plain);
  for (const json& c : no_usage) EXPECT_FALSE(c.contains("usage")) << c.dump();
  EXPECT_EQ(no_usage.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(server->stats().completions, 3);
}

TEST_F(StreamTest, StreamedChatStartsWithTheRoleAndSendsDeltas) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  const std::string prompt = engine_->tokenizer().Decode(Prompt(150, 5));
  const json base{{"messages", {{{"role", "user"}, {"content", prompt}}}},
                  {"max_tokens", 16},
                  {"temperature", 0},
                  {"ignore_eos", true}};
  auto [status, whole] = Call(*client, "/v1/chat/completions", base);
  ASSERT_EQ(status, 200) << whole.dump();
  json req = base;
  req["stream"] = true;
  const std::vector<json> chunks = Stream(*client, "/v1/chat/completions", req);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  std::string text;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& c = chunks[i];
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], chunks[0]["id"]);
    EXPECT_THAT(c["id"].get<std::string>(), ::testing::StartsWith("chatcmpl-"));
    const json& delta = c["choices"][0]["delta"];
    if (i > 0) {
      EXPECT_FALSE(delta.contains("role")) << c.dump();
    }
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(chunks.back()["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"]);
}

TEST_F(StreamTest, StopStringsAreHeldBackUntilDecided) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  const json base{
      {"prompt", Prompt(120, 3)}, {"max_tokens", 30}, {"temperature", 0}, {"ignore_eos", true}};
  auto [s1, free_run] = Call(*client, "/v1/completions", base);
  ASSERT_EQ(s1, 200);
  const std::string full = free_run["choices"][0]["text"];
  ASSERT_GE(full.size(), 12u);
  // A stop string from the middle of the free-running answer.
  json req = base;
  req["stop"] = full.substr(full.size() / 2, 3);
  auto [s2, stopped] = Call(*client, "/v1/completions", req);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  req["stream"] = true;
  std::string text;
  for (const json& c : Stream(*client, "/v1/completions", req)) {
    text += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, stopped["choices"][0]["text"]);
  EXPECT_THAT(text, ::testing::Not(HasSubstr(req["stop"].get<std::string>())));
}

// Sends a request on a raw socket and reads until `until` appears; returns what was read.
std::string ReadUntil(boost::asio::ip::tcp::socket& sock, boost::asio::streambuf& buf,
                      const std::string& until) {
  boost::system::error_code ec;
  boost::asio::read_until(sock, buf, until, ec);
  EXPECT_FALSE(ec) << ec.message();
  return std::string(boost::asio::buffers_begin(buf.data()), boost::asio::buffers_end(buf.data()));
}

TEST_F(StreamTest, AClientThatHangsUpMidStreamCancelsItsRequest) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket sock(ioc);
  sock.connect(
      boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), server->port()));
  const std::string body = json{
      {"prompt", Prompt(128)},
      {"max_tokens", 20000},
      {"ignore_eos", true},
      {"stream", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  boost::asio::write(sock, boost::asio::buffer(request));
  boost::asio::streambuf buf;
  // The header and the first events arrive while the request still runs.
  const std::string got = ReadUntil(sock, buf, "\"text_completion\"");
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(got, HasSubstr("text/event-stream"));
  EXPECT_THAT(got, HasSubstr("data: {"));
  EXPECT_EQ(server->stats().scheduler.finished, 0);
  sock.close();
  EXPECT_TRUE(WaitFor([&] { return server->stats().scheduler.cancelled == 1; }));
  EXPECT_EQ(server->stats().disconnected, 1);
  EXPECT_EQ(server->stats().scheduler.finished, 0);
  // The server goes on serving.
  auto client = Client(*server);
  auto [status, ok] = Call(*client, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(status, 200) << ok.dump();
}

TEST_F(StreamTest, ErrorsBeforeTheFirstEventKeepTheirStatus) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  // prompt + max_tokens over the context: a 400 JSON answer, not an event stream.
  HttpResponse r = Raw(*client, "/v1/completions",
                       json{{"prompt", "x"}, {"max_tokens", 65536}, {"stream", true}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_THAT(r.body, HasSubstr("context_length_exceeded"));
  for (const auto& [field, body] : std::vector<std::pair<std::string, json>>{
           {"logprobs", {{"prompt", "x"}, {"stream", true}, {"logprobs", 1}}},
           {"echo", {{"prompt", "x"}, {"stream", true}, {"echo", true}}},
           {"stream_options", {{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}},
           {"stream_options.foo",
            {{"prompt", "x"}, {"stream", true}, {"stream_options", {{"foo", 1}}}}}}) {
    auto [status, err] = Call(*client, "/v1/completions", body);
    EXPECT_EQ(status, 400) << field;
    EXPECT_EQ(err["error"]["param"], field) << err.dump();
  }
}

TEST_F(StreamTest, ModelsByIdIdsAndCreated) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  auto [s1, model] = Call(*client, "/v1/models/tiny", json());
  EXPECT_EQ(s1, 200);
  EXPECT_EQ(model["id"], "tiny");
  EXPECT_EQ(model["object"], "model");
  auto [s2, escaped] = Call(*client, "/v1/models/ti%6Ey", json());
  EXPECT_EQ(s2, 200);
  auto [s3, missing] = Call(*client, "/v1/models/other%2Fmodel", json());
  EXPECT_EQ(s3, 404);
  EXPECT_EQ(missing["error"]["code"], "model_not_found");
  EXPECT_THAT(missing["error"]["message"].get<std::string>(), HasSubstr("'other/model'"));
  auto [s4, post] = Call(*client, "/v1/models/tiny", json::object());
  EXPECT_EQ(s4, 405);

  const json req{{"prompt", "x"}, {"max_tokens", 1}};
  auto [a_status, a] = Call(*client, "/v1/completions", req);
  auto [b_status, b] = Call(*client, "/v1/completions", req);
  ASSERT_EQ(a_status, 200);
  ASSERT_EQ(b_status, 200);
  EXPECT_NE(a["id"], b["id"]);
  EXPECT_GE(a["created"].get<int64_t>(), model["created"].get<int64_t>());
  // A restarted server gives other ids (a random prefix), not the same sequence again.
  server.reset();
  auto again = Start();
  ASSERT_NE(again, nullptr);
  auto client2 = Client(*again);
  auto [c_status, c] = Call(*client2, "/v1/completions", req);
  ASSERT_EQ(c_status, 200);
  EXPECT_NE(c["id"], a["id"]);
}

TEST_F(StreamTest, EchoWithLogprobsScoresThePromptAsLmEvalAsks) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  const std::vector<int32_t> prompt = Prompt(128, 9);
  // lm-eval's local-completions loglikelihood request (max_tokens 0 here, 1 in lm-eval).
  auto [status, scored] = Call(*client, "/v1/completions",
                               json{{"prompt", prompt},
                                    {"max_tokens", 0},
                                    {"logprobs", 3},
                                    {"echo", true},
                                    {"temperature", 0}});
  ASSERT_EQ(status, 200) << scored.dump();
  const json& lp = scored["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size());
  ASSERT_EQ(lp["token_logprobs"].size(), prompt.size());
  ASSERT_EQ(lp["top_logprobs"].size(), prompt.size());
  ASSERT_EQ(lp["text_offset"].size(), prompt.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  EXPECT_EQ(scored["choices"][0]["text"], engine_->tokenizer().Decode(prompt));
  for (size_t i = 1; i < prompt.size(); ++i) {
    const double v = lp["token_logprobs"][i].get<double>();
    EXPECT_LE(v, 0.0);
    // Up to 3: byte-level tokens that are not valid UTF-8 alone all read as U+FFFD, one key.
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 3u);
    double best = -INFINITY;
    for (const auto& [tok, p] : lp["top_logprobs"][i].items())
      best = std::max(best, p.get<double>());
    EXPECT_GE(best, v);
  }
  // Position k's top alternatives equal those of a one-token greedy completion of the first k
  // prompt tokens (the same logits, reached by prefill in one piece instead of token by token).
  for (size_t k : {size_t{5}, size_t{23}, prompt.size() - 1}) {
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + static_cast<int64_t>(k));
    auto [s, one] =
        Call(*client, "/v1/completions",
             json{{"prompt", prefix}, {"max_tokens", 1}, {"logprobs", 3}, {"temperature", 0}});
    ASSERT_EQ(s, 200) << one.dump();
    const json& top = one["choices"][0]["logprobs"]["top_logprobs"][0];
    ASSERT_GE(top.size(), 1u);
    for (const auto& [tok, p] : top.items()) {
      ASSERT_TRUE(lp["top_logprobs"][k].contains(tok)) << k << " " << tok;
      EXPECT_NEAR(lp["top_logprobs"][k][tok].get<double>(), p.get<double>(), 1e-9) << k;
    }
    // The greedy token is the likeliest alternative.
    double best = -INFINITY;
    for (const auto& [tok, p] : top.items()) best = std::max(best, p.get<double>());
    EXPECT_NEAR(one["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(), best, 1e-12);
  }
  // max_tokens 0 needs echo with logprobs; logprobs over 20 and chat logprobs are refused.
  for (const auto& [path, body, field] : std::vector<std::tuple<std::string, json, std::string>>{
           {"/v1/completions", {{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},
           {"/v1/completions", {{"prompt", "x"}, {"logprobs", 21}}, "logprobs"},
           {"/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"logprobs", true}},
            "logprobs"},
           {"/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}},
            "top_logprobs"},
           {"/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "x"}}}},
             {"stream", true},
             {"logprobs", true}},
            "logprobs"}}) {
    auto [s, err] = Call(*client, path, body);
    EXPECT_EQ(s, 400) << body.dump();
    EXPECT_EQ(err["error"]["param"], field) << err.dump();
  }
}

TEST_F(StreamTest, EveryFieldIsHonouredOrRefused) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  const std::vector<int32_t> prompt = Prompt(128, 4);
  const json greedy{
      {"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  auto [s0, ref] = Call(*client, "/v1/completions", greedy);
  ASSERT_EQ(s0, 200);
  // top_k 1 samples the argmax: the greedy answer at any temperature and seed.
  json topk = greedy;
  topk["temperature"] = 1.5;
  topk["top_k"] = 1;
  topk["seed"] = 99;
  auto [s1, k1] = Call(*client, "/v1/completions", topk);
  ASSERT_EQ(s1, 200) << k1.dump();
  EXPECT_EQ(k1["choices"][0]["text"], ref["choices"][0]["text"]);
  // min_tokens: a stop token cannot end generation before min_tokens tokens.
  GenerateRequest first;
  first.prompt = prompt;
  first.max_new_tokens = 1;
  auto one = engine_->Generate(first);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  json stop_first = greedy;
  stop_first["stop_token_ids"] = {one->tokens[0]};
  auto [s3, stopped] = Call(*client, "/v1/completions", stop_first);
  EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  stop_first["min_tokens"] = 3;
  auto [s4, held] = Call(*client, "/v1/completions", stop_first);
  ASSERT_EQ(s4, 200) << held.dump();
  EXPECT_GE(held["usage"]["completion_tokens"].get<int>(), 3);
  // Unknown fields and unsupported asks are refused, naming the field.
  const json chat_msgs = {{{"role", "user"}, {"content", "x"}}};
  for (const auto& [path, body, field] : std::vector<std::tuple<std::string, json, std::string>>{
           {"/v1/completions", {{"prompt", "x"}, {"frobnicate", 1}}, "frobnicate"},
           {"/v1/completions", {{"prompt", "x"}, {"n", 2}}, "n"},
           {"/v1/completions", {{"prompt", {"a", "b"}}}, "prompt"},
           {"/v1/completions",
            {{"prompt", "x"}, {"response_format", {{"type", "text"}}}},
            "response_format"},
           {"/v1/chat/completions",
            {{"messages", chat_msgs}, {"response_format", {{"type", "json_object"}}}},
            "response_format"},
           {"/v1/chat/completions", {{"messages", chat_msgs}, {"echo", true}}, "echo"},
           {"/v1/completions",
            {{"prompt", "x"}, {"min_tokens", 5}, {"max_tokens", 2}},
            "min_tokens"}}) {
    auto [s, err] = Call(*client, path, body);
    EXPECT_EQ(s, 400) << body.dump();
    EXPECT_EQ(err["error"]["param"], field) << err.dump();
  }
  // Accepted fields that change nothing here.
  auto [s5, ok] = Call(*client, "/v1/chat/completions",
                       json{{"messages", chat_msgs},
                            {"max_tokens", 1},
                            {"user", "someone"},
                            {"response_format", {{"type", "text"}}},
                            {"top_k", -1}});
  EXPECT_EQ(s5, 200) << ok.dump();
}

TEST_F(StreamTest, ChatMaxTokensDefaultsToTheRestOfTheContext) {
  // The tiny model with a 200-token context.
  const std::filesystem::path dir = dir_->path() / "short";
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(model_dir())) {
    std::filesystem::copy(e.path(), dir / e.path().filename());
  }
  json cfg = json::parse(std::ifstream(dir / "config.json"));
  cfg["max_position_embeddings"] = 200;
  std::ofstream(dir / "config.json") << cfg.dump(1);
  auto server = Start({}, dir);
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  const std::string text = engine_->tokenizer().Decode(Prompt(190, 2));
  const int64_t n = static_cast<int64_t>(engine_->tokenizer().Encode(text).size());
  ASSERT_LT(n, 200);
  auto [status, chat] = Call(*client, "/v1/chat/completions",
                             json{{"messages", {{{"role", "user"}, {"content", text}}}},
                                  {"ignore_eos", true},
                                  {"temperature", 0}});
  ASSERT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["usage"]["completion_tokens"], 200 - n);
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "length");
}

TEST_F(StreamTest, ApiKeyAndAccessLog) {
  std::mutex mu;
  std::vector<std::string> lines;
  HttpServerOptions o;
  o.api_key = "s3cret-key";
  o.access_log = [&](std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(line);
  };
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  auto anonymous = Client(*server);
  auto [hs, health] = Call(*anonymous, "/health", json());
  EXPECT_EQ(hs, 200);  // /health stays open
  HttpResponse denied = Raw(*anonymous, "/v1/models", json());
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(denied.headers["www-authenticate"], "Bearer");
  EXPECT_EQ(json::parse(denied.body)["error"]["code"], "invalid_api_key");
  for (const std::string wrong :
       {"Bearer s3cret-ke", "Bearer s3cret-key2", "s3cret-key", "Basic s3cret-key"}) {
    auto c = Client(*server, {{"Authorization", wrong}});
    auto [s, err] = Call(*c, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 1}});
    EXPECT_EQ(s, 401) << wrong;
    EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  }
  auto authed = Client(*server, {{"Authorization", "Bearer s3cret-key"}});
  auto [ms, models] = Call(*authed, "/v1/models", json());
  EXPECT_EQ(ms, 200);
  const std::vector<int32_t> prompt = Prompt(128);
  auto [cs, done] = Call(*authed, "/v1/completions",
                         json{{"prompt", prompt}, {"max_tokens", 2}, {"ignore_eos", true}});
  ASSERT_EQ(cs, 200) << done.dump();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_THAT(lines[0], HasSubstr(" 127.0.0.1 \"GET /health\" 200 prompt_tokens=- "));
  EXPECT_THAT(lines[1], HasSubstr("\"GET /v1/models\" 401 "));
  EXPECT_THAT(lines[7],
              HasSubstr("\"POST /v1/completions\" 200 prompt_tokens=" +
                        std::to_string(prompt.size()) + " completion_tokens=2 stream=0 ms="));
  for (const std::string& line : lines) EXPECT_THAT(line, ::testing::Not(HasSubstr("s3cret")));
}

}  // namespace
}  // namespace nw
