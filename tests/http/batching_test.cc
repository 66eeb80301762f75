// Continuous batching in `nw serve` (http/batch_scheduler.h): concurrent requests run together
// (their decode steps batched, prompts in chunks) and get exactly the completions they get one at a
// time; clients that hang up leave the batch; the scheduler's options are checked.
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "http/client.h"
#include "http/server.h"
#include "task/niah.h"
#include "tests/http/http_test_util.h"

namespace nw {
namespace {

using json = nlohmann::json;
using testing_http::Gate;
using testing_http::TempDir;
using testing_http::WaitFor;

class BatchingTest : public testing_http::TinyEngineSuite {
 protected:
  static std::unique_ptr<HttpServer> Start(HttpServerOptions o, const std::string& backend) {
    auto model = ServeModel::Load(model_dir(), backend);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return nullptr;
    o.listen = "127.0.0.1:0";
    o.model_name = "tiny";
    auto server = HttpServer::Start(*std::move(model), std::move(o));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? *std::move(server) : nullptr;
  }
  static std::unique_ptr<HttpClient> Client(const HttpServer& s) {
    auto url = HttpUrl::Parse(s.url());
    EXPECT_TRUE(url.ok());
    return std::make_unique<HttpClient>(*url, HttpClientOptions{});
  }
  static std::pair<int, json> Call(HttpClient& c, const json& body) {
    const std::string path = body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    auto r = c.Send("POST", path, body.dump(), std::chrono::seconds(300));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {0, json()};
    json j = json::parse(r->body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r->body;
    return {r->status, j};
  }
  static std::vector<int32_t> Prompt(int64_t length, uint64_t seed) {
    NiahSpec ns;
    ns.context_length = length;
    ns.seed = seed;
    auto p = BuildNiahPrompt(engine_->tokenizer(), ns);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? p->tokens : std::vector<int32_t>{};
  }
  // What must not depend on batching: the choice (text, finish reason, matched stop, indexer
  // top-k) and the usage.
  static json Answer(const json& response) {
    json choice = response["choices"][0];
    json a{{"usage", response["usage"]}, {"finish_reason", choice["finish_reason"]}};
    a["matched_stop"] = choice.value("matched_stop", json());
    a["text"] = choice.contains("text") ? choice["text"] : choice["message"]["content"];
    if (choice.contains("meta_info")) {
      a["indexer_topk"] = choice["meta_info"]["indexer_topk"];
      a["indexer_topk_shape"] = choice["meta_info"]["indexer_topk_shape"];
    }
    return a;
  }

  // A mix of requests: greedy at several lengths, ignore_eos, stop strings and ids, seeded
  // sampling, chat, indexer top-k, another top-k, bf16 weights and activations.
  static std::vector<json> Requests() {
    std::vector<json> r;
    for (int i = 0; i < 4; ++i) {
      r.push_back(json{{"prompt", Prompt(100 + 70 * i, 20 + i)},
                       {"max_tokens", 10 + 3 * i},
                       {"temperature", 0},
                       {"ignore_eos", i % 2 == 0}});
    }
    r.push_back(json{{"prompt", Prompt(150, 31)},
                     {"max_tokens", 14},
                     {"temperature", 0.8},
                     {"top_p", 0.9},
                     {"seed", 1234},
                     {"ignore_eos", true}});
    r.push_back(json{{"prompt", "The special magic number is"},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"stop", json::array({"e", " the"})}});
    r.push_back(json{{"messages", json::array({json{{"role", "user"}, {"content", "Hello"}}})},
                     {"max_tokens", 9},
                     {"temperature", 0},
                     {"ignore_eos", true}});
    r.push_back(json{{"prompt", Prompt(130, 41)},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"return_indexer_topk", true},
                     {"index_topk", 8}});
    r.push_back(json{{"prompt", Prompt(110, 51)},
                     {"max_tokens", 11},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"precision", "bf16"}});
    return r;
  }
};

TEST_F(BatchingTest, ConcurrentRequestsGetTheCompletionsTheyGetOneAtATime) {
  const std::vector<json> requests = Requests();
  for (const char* backend : {"cpu", "cpu-paged"}) {
    SCOPED_TRACE(backend);
    // One at a time: a server that runs a single request, called sequentially.
    std::vector<json> sequential;
    {
      HttpServerOptions o;
      o.max_running = 1;
      auto server = Start(o, backend);
      ASSERT_NE(server, nullptr);
      auto client = Client(*server);
      for (const json& body : requests) {
        auto [status, response] = Call(*client, body);
        ASSERT_EQ(status, 200) << response.dump();
        sequential.push_back(Answer(response));
      }
      EXPECT_EQ(server->stats().scheduler.max_decode_batch, 1);
    }
    // Together: every request is queued before the scheduler starts the first one.
    Gate gate;
    HttpServerOptions o;
    o.max_running = 16;
    o.max_batched_tokens = 200;  // the prompts take several steps: prefill and decode interleave
    o.before_generate = [&gate] { gate.Enter(); };
    auto server = Start(o, backend);
    ASSERT_NE(server, nullptr);
    std::vector<std::unique_ptr<HttpClient>> clients;
    std::vector<std::future<std::pair<int, json>>> answers;
    for (const json& body : requests) {
      clients.push_back(Client(*server));
      HttpClient* c = clients.back().get();
      answers.push_back(std::async(std::launch::async, [c, body] { return Call(*c, body); }));
    }
    ASSERT_TRUE(
        WaitFor([&] { return server->stats().requests == static_cast<int64_t>(requests.size()); },
                std::chrono::seconds(120)));
    gate.Open();
    for (size_t i = 0; i < answers.size(); ++i) {
      auto [status, response] = answers[i].get();
      ASSERT_EQ(status, 200) << response.dump();
      EXPECT_EQ(Answer(response), sequential[i]) << "request " << i;
    }
    const BatchSchedulerStats st = server->stats().scheduler;
    EXPECT_GE(st.max_decode_batch, 4) << "decode steps were not batched";
    EXPECT_LT(st.decode_steps, st.decoded_tokens);
    EXPECT_GT(st.prefill_chunks, static_cast<int64_t>(requests.size()));  // prompts were split
    EXPECT_EQ(st.finished, static_cast<int64_t>(requests.size()));
    EXPECT_EQ(server->stats().completions, static_cast<int64_t>(requests.size()));
  }
}

TEST_F(BatchingTest, GreedyBatchedAnswersEqualTheInProcessEngine) {
  HttpServerOptions o;
  o.max_running = 8;
  o.max_batched_tokens = 64;
  auto server = Start(o, "cpu");
  ASSERT_NE(server, nullptr);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(Prompt(100 + 61 * i, 70 + i));
  std::vector<std::unique_ptr<HttpClient>> clients;
  std::vector<std::future<std::pair<int, json>>> answers;
  for (const auto& p : prompts) {
    clients.push_back(Client(*server));
    HttpClient* c = clients.back().get();
    const json body{{"prompt", p}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
    answers.push_back(std::async(std::launch::async, [c, body] { return Call(*c, body); }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto [status, response] = answers[i].get();
    ASSERT_EQ(status, 200) << response.dump();
    GenerateRequest req;
    req.prompt = prompts[i];
    req.max_new_tokens = 12;
    auto ref = engine_->Generate(req);
    ASSERT_TRUE(ref.ok());
    const std::string text = engine_->tokenizer().Decode(ref->tokens);
    EXPECT_EQ(response["choices"][0]["text"],
              json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace)));
  }
  // 64 tokens a step: every prompt (100 .. 344 tokens) took several chunks.
  EXPECT_GE(server->stats().scheduler.prefill_chunks, 10);
}

TEST_F(BatchingTest, AClientThatHangsUpLeavesTheBatch) {
  Gate gate;
  HttpServerOptions o;
  o.before_generate = [&gate] { gate.Enter(); };
  auto server = Start(o, "cpu");
  ASSERT_NE(server, nullptr);
  {
    namespace asio = boost::asio;
    asio::io_context ioc;
    asio::ip::tcp::socket sock(ioc);
    sock.connect({asio::ip::make_address("127.0.0.1"), server->port()});
    const std::string body =
        json{{"prompt", Prompt(100, 3)}, {"max_tokens", 500}, {"ignore_eos", true}}.dump();
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::write(sock, asio::buffer(req));
    ASSERT_TRUE(WaitFor([&] { return gate.entered() == 1; }, std::chrono::seconds(120)));
  }  // the client hangs up while its request is being admitted
  ASSERT_TRUE(
      WaitFor([&] { return server->stats().disconnected == 1; }, std::chrono::seconds(120)));
  gate.Open();
  ASSERT_TRUE(
      WaitFor([&] { return server->stats().scheduler.cancelled == 1; }, std::chrono::seconds(120)));
  EXPECT_EQ(server->stats().scheduler.finished, 0);
  EXPECT_EQ(server->stats().completions, 0);
  // The server goes on serving.
  auto client = Client(*server);
  auto [status, response] =
      Call(*client, json{{"prompt", Prompt(100, 4)}, {"max_tokens", 3}, {"ignore_eos", true}});
  EXPECT_EQ(status, 200) << response.dump();
  EXPECT_EQ(response["usage"]["completion_tokens"], 3);
}

TEST_F(BatchingTest, SchedulerOptionsAreChecked) {
  for (auto [running, tokens] : {std::pair<int, int64_t>{0, 256}, {8, 8}, {8, 4}}) {
    auto model = ServeModel::Load(model_dir(), "cpu");
    ASSERT_TRUE(model.ok());
    HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    o.max_running = running;
    o.max_batched_tokens = tokens;
    auto server = HttpServer::Start(*std::move(model), o);
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument) << running << " " << tokens;
  }
}

}  // namespace
}  // namespace nw
