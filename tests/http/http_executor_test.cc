// The http campaign backend end to end: campaigns with `backend: [cpu, {http: ...}]` against
// `nw serve` started on loopback give the in-process engine's answers, job by job and through
// the embedded coordinator into SQLite; and the fault cases against real local servers (not up
// yet, killed and restarted between and during requests, too slow) and a scripted raw server
// (500s, malformed JSON, responses cut short, 4xx), each ending as the right outcome.
#include "http/http_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/asio/connect.hpp>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compose/embedded_run.h"
#include "coordinator/campaign/campaign.h"
#include "db/store.h"
#include "http/server.h"
#include "report/export.h"
#include "report/query.h"
#include "tests/http/http_test_util.h"

namespace nw {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing_http::FreePort;
using testing_http::Gate;
using testing_http::JsonReply;
using testing_http::RawReply;
using testing_http::RawRequest;
using testing_http::RawServer;
using testing_http::TempDir;
using testing_http::WaitFor;

// What a job result says about the answer, as the job protocol carries it (invalid UTF-8 in the
// generated text replaced, as JobResult::ToJson on the wire does).
json Answer(const JobResult& r) {
  json probes = json::array();
  for (const ProbeSummary& p : r.probes) {
    std::vector<int32_t> ranks;  // the HTTP backend reports ranks >= topk as topk
    for (int32_t x : p.ranks) ranks.push_back(x < 0 ? x : std::min(x, p.topk));
    probes.push_back(
        json{{"layer", p.layer},
             {"positions", p.positions},
             {"in_topk_fraction", p.in_topk_fraction},
             {"in_topk_last", p.in_topk_last},
             {"topk", p.topk},
             {"ranks", ranks},
             {"topk_last", p.topk_last},
             {"needle_rank_min",
              p.needle_rank_min < 0 ? p.needle_rank_min : std::min(p.needle_rank_min, p.topk)}});
  }
  return json::parse(json{
      {"outcome", OutcomeName(r.outcome)},
      {"generated_text", r.generated_text},
      {"expected", r.expected},
      {"needle_token_offset", r.needle_token_offset},
      {"prompt_hash", r.prompt_hash},
      {"prompt_tokens", r.prompt_tokens},
      {"generated_tokens", r.generated_tokens},
      {"probes", probes}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

class HttpExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    Status s = testing_http::WriteTinyModel(model_dir());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::filesystem::path model_dir() { return dir_->path() / "tiny"; }

  static std::unique_ptr<HttpServer> Serve(uint16_t port = 0,
                                           std::function<void()> before_generate = nullptr) {
    auto model = ServeModel::Load(model_dir(), "cpu");
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return nullptr;
    HttpServerOptions o;
    o.listen = "127.0.0.1:" + std::to_string(port);
    o.model_name = "tiny";
    o.before_generate = std::move(before_generate);
    auto server = HttpServer::Start(*std::move(model), std::move(o));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // The campaign text: the tiny model, `backend`, and the given matrix lines.
  static std::string Yaml(const std::string& name, const std::string& backend,
                          const std::string& matrix =
                              "  context_length: [160, 400]\n"
                              "  needle_position: [0.0, 0.5, -64]\n  topk: [8, 16]\n",
                          const std::string& extra = "probe: true\n") {
    return "name: " + name + "\nmodel: " + model_dir().string() + "\nmatrix:\n" + matrix +
           "  backend: " + backend + "\ngeneration: {max_new_tokens: 6}\n" + extra;
  }
  static std::string HttpBackend(const std::string& url, const std::string& settings = "") {
    return "{http: {url: '" + url + "', model: tiny, engine_params: true" +
           (settings.empty() ? "" : ", " + settings) + "}}";
  }
  static std::vector<JobSpec> Jobs(const std::string& text) {
    ParseOptions po;
    po.base_dir = dir_->path();
    auto c = ParseCampaignText(text, "t.yaml", po);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    auto r = ResolveCampaign(*c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    auto jobs = ExpandCampaign(*r);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    return jobs.ok() ? *std::move(jobs) : std::vector<JobSpec>{};
  }
  // One http job (and its cpu twin) for a server at `url`.
  static std::pair<JobSpec, JobSpec> Pair(const std::string& url, const std::string& settings = "",
                                          int64_t length = 200,
                                          const std::string& extra = "probe: true\n") {
    auto jobs = Jobs(Yaml(
        "pair", "[cpu, " + HttpBackend(url, settings) + "]",
        "  context_length: " + std::to_string(length) + "\n  needle_position: 0.5\n  topk: 16\n",
        extra));
    EXPECT_EQ(jobs.size(), 2u);
    if (jobs.size() != 2) return {};
    return {jobs[1], jobs[0]};
  }
  static HttpExecutorOptions FastRetries(std::shared_ptr<HttpBackendPool> pool = nullptr) {
    HttpExecutorOptions o;
    o.worker_id = "test-worker";
    o.pool = std::move(pool);
    o.backoff_initial_ms = 20;
    o.backoff_max_ms = 100;
    o.ready_poll_ms = 20;
    return o;
  }
  static JobResult InProcess(const JobSpec& cpu_job) {
    EngineExecutor engine(EngineExecutorOptions{});
    return engine.Execute(cpu_job, cpu_job.Key(), 1);
  }

  static inline std::unique_ptr<TempDir> dir_;
};

TEST_F(HttpExecutorTest, JobByJobTheServerGivesTheInProcessEnginesAnswers) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  auto jobs = Jobs(Yaml("same", "[cpu, " + HttpBackend(server->url()) + "]"));
  ASSERT_EQ(jobs.size(), 24u);
  EngineExecutor engine(EngineExecutorOptions{});
  HttpExecutor http(FastRetries());
  std::map<std::string, int> outcomes;
  for (size_t i = 0; i < 12; ++i) {
    const JobSpec& cpu = jobs[i];
    const JobSpec& h = jobs[i + 12];
    ASSERT_EQ(cpu.backend, "cpu");
    ASSERT_EQ(h.backend, "http");
    ASSERT_EQ(cpu.context_length, h.context_length);
    ASSERT_EQ(cpu.needle_position, h.needle_position);
    ASSERT_EQ(cpu.topk, h.topk);
    const JobResult a = engine.Execute(cpu, cpu.Key(), 1);
    const JobResult b = http.Execute(h, h.Key(), 1);
    ASSERT_TRUE(IsAnswerOutcome(a.outcome) || a.outcome == Outcome::kTruncated ||
                a.outcome == Outcome::kEmpty)
        << a.error_message;
    EXPECT_EQ(Answer(b), Answer(a)) << "job " << i << ": " << b.error_message;
    EXPECT_EQ(b.job_key, h.Key());
    EXPECT_EQ(b.prompt_tokens, h.context_length);
    EXPECT_EQ(b.device, server->url());
    EXPECT_THAT(b.engine_version, HasSubstr("nw-serve"));
    EXPECT_EQ(b.worker_id, "test-worker");
    ASSERT_EQ(b.probes.size(), 1u);
    ++outcomes[std::string(OutcomeName(b.outcome))];
  }
  EXPECT_EQ(http.stats().requests, 12);
  EXPECT_EQ(http.stats().retries, 0);
  EXPECT_EQ(server->stats().connections, 1);  // health check and every job on one connection
}

// Runs `text` through the embedded coordinator with BackendRouter workers; results by job key.
std::map<std::string, JobResult> RunCampaign(const std::filesystem::path& db,
                                             const std::string& text,
                                             const std::vector<JobSpec>& jobs, RunSummary* out) {
  std::map<std::string, JobResult> by_key;
  auto store = Store::Open(db);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return by_key;
  auto id = (*store)->UpsertCampaign("run", "t.yaml", text, 1);
  EXPECT_TRUE(id.ok());
  EXPECT_TRUE((*store)->SetCampaignJobs(*id, jobs, 1).ok());
  auto pool = std::make_shared<HttpBackendPool>();
  std::vector<std::unique_ptr<JobExecutor>> executors;
  for (int i = 0; i < 2; ++i) {
    EngineExecutorOptions eo;
    eo.worker_id = "w" + std::to_string(i);
    HttpExecutorOptions ho;
    ho.worker_id = eo.worker_id;
    ho.pool = pool;
    ho.backoff_initial_ms = 20;
    ho.backoff_max_ms = 100;
    executors.push_back(std::make_unique<BackendRouter>(eo, ho));
  }
  RunOptions ro;
  ro.scheduler.retry_backoff_initial_ms = 50;
  ro.scheduler.retry_backoff_max_ms = 200;
  auto summary = RunEmbedded(**store, *id, std::move(executors), ro);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  if (summary.ok()) *out = *summary;
  auto results = (*store)->Results(*id);
  EXPECT_TRUE(results.ok());
  if (results.ok()) {
    for (JobResult& r : *results) by_key[r.job_key] = std::move(r);
  }
  return by_key;
}

TEST_F(HttpExecutorTest, ACampaignThroughTheCoordinatorMatchesTheInProcessBackend) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  const std::string text = Yaml("db", "[cpu, " + HttpBackend(server->url()) + "]");
  auto jobs = Jobs(text);
  ASSERT_EQ(jobs.size(), 24u);
  TempDir tmp;
  RunSummary summary;
  auto results = RunCampaign(tmp.path() / "nw.db", text, jobs, &summary);
  EXPECT_EQ(summary.failed, 0);
  ASSERT_EQ(results.size(), 24u);
  for (size_t i = 0; i < 12; ++i) {
    const JobResult& a = results[jobs[i].Key()];
    const JobResult& b = results[jobs[i + 12].Key()];
    EXPECT_EQ(Answer(b), Answer(a)) << "job " << i;
    EXPECT_EQ(b.device, server->url());
  }
}

TEST_F(HttpExecutorTest, NothingIsLostWhenTheServerIsKilledMidCampaignAndRestarted) {
  Gate gate;
  std::atomic<int> generations{0};
  std::unique_ptr<HttpServer> server = Serve(0, [&] {
    if (++generations == 3) gate.Enter();  // the third request is in the engine when killed
  });
  ASSERT_NE(server, nullptr);
  const uint16_t port = server->port();
  const std::string text =
      Yaml("restart", "[cpu, " + HttpBackend(server->url(), "retries: 50") + "]");
  auto jobs = Jobs(text);
  ASSERT_EQ(jobs.size(), 24u);

  std::unique_ptr<HttpServer> restarted;
  std::thread controller([&] {
    ASSERT_TRUE(WaitFor([&] { return gate.entered() == 1; }, std::chrono::seconds(120)));
    std::thread stopper([&] { server->Stop(); });
    // Stop closes the listener and every connection first; then the engine may go on.
    ASSERT_TRUE(WaitFor([&] {
      boost::asio::io_context ioc;
      boost::asio::ip::tcp::socket s(ioc);
      boost::system::error_code ec;
      s.connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
      return static_cast<bool>(ec);
    }));
    gate.Open();
    stopper.join();
    restarted = Serve(port);
  });
  TempDir tmp;
  RunSummary summary;
  auto results = RunCampaign(tmp.path() / "nw.db", text, jobs, &summary);
  controller.join();
  ASSERT_NE(restarted, nullptr);
  EXPECT_GE(restarted->stats().completions, 1);
  EXPECT_EQ(summary.failed, 0);
  ASSERT_EQ(results.size(), 24u);
  for (size_t i = 0; i < 12; ++i) {
    const JobResult& a = results[jobs[i].Key()];
    const JobResult& b = results[jobs[i + 12].Key()];
    EXPECT_EQ(Answer(b), Answer(a)) << "job " << i << ": " << b.error_message;
  }
}

TEST_F(HttpExecutorTest, WaitsForAServerThatIsNotUpYet) {
  const uint16_t port = FreePort();
  auto [job, twin] = Pair("http://127.0.0.1:" + std::to_string(port), "ready_timeout_ms: 60000");
  HttpExecutor http(FastRetries());
  auto pending = std::async(std::launch::async, [&] { return http.Execute(job, job.Key(), 1); });
  ASSERT_TRUE(WaitFor([&] { return http.stats().health_checks >= 2; }));
  EXPECT_EQ(http.stats().requests, 0);  // nothing is sent before the server is ready
  auto server = Serve(port);
  ASSERT_NE(server, nullptr);
  const JobResult r = pending.get();
  EXPECT_EQ(Answer(r), Answer(InProcess(twin))) << r.error_message;
  EXPECT_EQ(http.stats().requests, 1);
}

TEST_F(HttpExecutorTest, GivesUpWaitingAfterTheReadyTimeout) {
  auto [job, twin] =
      Pair("http://127.0.0.1:" + std::to_string(FreePort()), "ready_timeout_ms: 300");
  HttpExecutor http(FastRetries());
  const JobResult r = http.Execute(job, job.Key(), 1);
  EXPECT_EQ(r.outcome, Outcome::kEngineError);
  EXPECT_EQ(r.error_code, "unavailable");
  EXPECT_TRUE(r.retryable);
  EXPECT_THAT(r.error_message, HasSubstr("did not become ready within 300 ms"));
  EXPECT_GE(http.stats().health_checks, 2);
  EXPECT_EQ(http.stats().requests, 0);
}

TEST_F(HttpExecutorTest, ServerKilledBetweenJobsAndRestarted) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  const uint16_t port = server->port();
  auto [first, first_twin] = Pair(server->url(), "retries: 100", 180);
  auto [second, second_twin] = Pair(server->url(), "retries: 100", 220);
  HttpExecutor http(FastRetries());
  EXPECT_EQ(Answer(http.Execute(first, first.Key(), 1)), Answer(InProcess(first_twin)));
  server->Stop();
  auto pending =
      std::async(std::launch::async, [&] { return http.Execute(second, second.Key(), 1); });
  ASSERT_TRUE(WaitFor([&] { return http.stats().transport_errors >= 2; }));
  server = Serve(port);
  ASSERT_NE(server, nullptr);
  const JobResult r = pending.get();
  EXPECT_EQ(Answer(r), Answer(InProcess(second_twin))) << r.error_message;
  EXPECT_GE(http.stats().retries, 2);
}

TEST_F(HttpExecutorTest, ServerKilledDuringARequestAndRestarted) {
  Gate gate;
  auto server = Serve(0, [&gate] { gate.Enter(); });
  ASSERT_NE(server, nullptr);
  const uint16_t port = server->port();
  auto [job, twin] = Pair(server->url(), "retries: 100");
  HttpExecutor http(FastRetries());
  auto pending = std::async(std::launch::async, [&] { return http.Execute(job, job.Key(), 1); });
  ASSERT_TRUE(WaitFor([&] { return gate.entered() == 1; }));
  std::thread stopper([&] { server->Stop(); });
  ASSERT_TRUE(WaitFor([&] { return http.stats().transport_errors >= 1; }));  // saw it go
  gate.Open();
  stopper.join();
  server = Serve(port);
  ASSERT_NE(server, nullptr);
  const JobResult r = pending.get();
  EXPECT_EQ(Answer(r), Answer(InProcess(twin))) << r.error_message;
  EXPECT_GE(http.stats().retries, 1);
}

TEST_F(HttpExecutorTest, ASlowResponsePastTheTimeoutIsATimeout) {
  Gate gate;
  auto server = Serve(0, [&gate] { gate.Enter(); });
  ASSERT_NE(server, nullptr);
  auto [job, twin] = Pair(server->url(), "timeout_ms: 300");
  HttpExecutor http(FastRetries());
  const auto t0 = std::chrono::steady_clock::now();
  const JobResult r = http.Execute(job, job.Key(), 1);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  gate.Open();
  EXPECT_EQ(r.outcome, Outcome::kTimeout);
  EXPECT_EQ(r.error_code, "deadline_exceeded");
  EXPECT_THAT(r.error_message, HasSubstr("within 300 ms"));
  EXPECT_EQ(http.stats().requests, 1);  // a timeout is not retried
  EXPECT_EQ(http.stats().timeouts, 1);
}

TEST_F(HttpExecutorTest, ChatSendsTheTextAndRecordsTheServersTokenCount) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  auto [job, twin] = Pair(server->url(), "api: chat");
  HttpExecutor http(FastRetries());
  const JobResult r = http.Execute(job, job.Key(), 1);
  ASSERT_NE(r.outcome, Outcome::kEngineError) << r.error_message;
  auto tok = Tokenizer::Load(model_dir() / "tokenizer.json");
  ASSERT_TRUE(tok.ok());
  NiahSpec ns;
  ns.context_length = job.context_length;
  ns.needle_position = job.needle_position;
  ns.seed = job.HaystackSeed();
  auto prompt = BuildNiahPrompt(*tok, ns);
  ASSERT_TRUE(prompt.ok());
  // One user message is sent as is; the server's count of the re-encoded text is recorded.
  EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(tok->Encode(prompt->text).size()));
  EXPECT_EQ(r.prompt_hash, prompt->prompt_hash);
}

TEST_F(HttpExecutorTest, RouterAdvertisesAndRoutesBothKinds) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  auto [job, twin] = Pair(server->url());
  BackendRouter router(EngineExecutorOptions{}, FastRetries());
  const json caps = router.Capabilities();
  EXPECT_EQ(caps["backends"], json::array({"cpu", "cpu-paged", "cpu-pd", "http"}));
  EXPECT_EQ(router.Execute(twin, twin.Key(), 1).device, "cpu");
  EXPECT_EQ(router.Execute(job, job.Key(), 1).device, server->url());
  EXPECT_EQ(server->stats().completions, 1);
}

TEST_F(HttpExecutorTest, AChangedTokenizerIsAnEngineErrorNotAMiss) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  auto [job, twin] = Pair(server->url());
  job.http->tokenizer_digest = std::string(64, '0');
  HttpExecutor http(FastRetries());
  const JobResult r = http.Execute(job, job.Key(), 1);
  EXPECT_EQ(r.outcome, Outcome::kEngineError);
  EXPECT_EQ(r.error_code, "failed_precondition");
  EXPECT_THAT(r.error_message, HasSubstr("changed since the campaign was expanded"));
  EXPECT_EQ(http.stats().requests, 0);
}

// stream: true against `nw serve`: the same answers as without streaming (job by job, and
// through the coordinator into SQLite), each result with its latency figures; a job without
// stream has none. (Figures are checked for consistency, never against a time.)
TEST_F(HttpExecutorTest, StreamedAnswersEqualWholeOnesAndCarryTheirLatency) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  const std::string matrix =
      "  context_length: [160, 400]\n  needle_position: [0.0, 0.5, -64]\n  topk: 16\n";
  for (const std::string api : {"completions", "chat"}) {
    SCOPED_TRACE(api);
    auto whole = Jobs(Yaml("w", HttpBackend(server->url(), "api: " + api), matrix, ""));
    auto streamed =
        Jobs(Yaml("s", HttpBackend(server->url(), "api: " + api + ", stream: true"), matrix, ""));
    ASSERT_EQ(whole.size(), 6u);
    ASSERT_EQ(streamed.size(), 6u);
    HttpExecutor http(FastRetries());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_NE(streamed[i].Key(), whole[i].Key());
      const JobResult a = http.Execute(whole[i], whole[i].Key(), 1);
      const JobResult b = http.Execute(streamed[i], streamed[i].Key(), 1);
      ASSERT_TRUE(IsAnswerOutcome(a.outcome) || a.outcome == Outcome::kTruncated ||
                  a.outcome == Outcome::kEmpty)
          << a.error_message;
      EXPECT_EQ(Answer(b), Answer(a)) << "job " << i << ": " << b.error_message;
      EXPECT_FALSE(a.stream.has_value());
      ASSERT_TRUE(b.stream.has_value()) << b.error_message;
      const StreamTiming& t = *b.stream;
      // One event per scheduler step that made text, plus the finish: at least one, at most
      // one per generated token (the stop token makes none of its own).
      EXPECT_GE(t.events, 1);
      EXPECT_LE(t.events, b.generated_tokens + 1);
      EXPECT_GT(t.ttft_ms, 0);
      EXPECT_LE(t.ttft_ms, b.total_ms);
      EXPECT_LE(t.itl_p50_ms, t.itl_p95_ms);
      EXPECT_GE(t.tpot_ms, 0);
      if (b.generated_tokens <= 1) {
        EXPECT_EQ(t.tpot_ms, 0);
      }
      EXPECT_TRUE(CheckResultBounds(b, &streamed[i]).ok());
      // The figures survive the job protocol.
      auto back = JobResult::FromJson(json::parse(b.ToJson().dump()));
      ASSERT_TRUE(back.ok());
      EXPECT_TRUE(back->stream == b.stream);
    }
  }
}

TEST_F(HttpExecutorTest, StreamedLatencyIsStoredExportedAndSummedInTheViews) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  const std::string text =
      Yaml("db", "[cpu, " + HttpBackend(server->url(), "stream: true") + "]",
           "  context_length: [160, 400]\n  needle_position: [0.0, 0.5]\n  topk: 16\n", "");
  auto jobs = Jobs(text);
  ASSERT_EQ(jobs.size(), 8u);
  TempDir tmp;
  RunSummary summary;
  auto results = RunCampaign(tmp.path() / "nw.db", text, jobs, &summary);
  EXPECT_EQ(summary.failed, 0);
  ASSERT_EQ(results.size(), 8u);
  for (size_t i = 0; i < 4; ++i) {
    const JobResult& a = results[jobs[i].Key()];
    const JobResult& b = results[jobs[i + 4].Key()];
    EXPECT_EQ(Answer(b), Answer(a)) << "job " << i;
    EXPECT_FALSE(a.stream.has_value());  // the in-process backend does not stream
    ASSERT_TRUE(b.stream.has_value());
    EXPECT_GT(b.stream->ttft_ms, 0);
    EXPECT_GE(b.stream->events, 1);
  }
  // v_results has the columns; v_stream_latency sums the http configuration only.
  const std::filesystem::path db = tmp.path() / "nw.db";
  auto rows = report::RunReadOnlyQuery(
      db,
      "SELECT backend, COUNT(*), COUNT(ttft_ms), SUM(stream_events) > 0 FROM v_results "
      "GROUP BY backend ORDER BY backend");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->rows.size(), 2u);
  EXPECT_EQ(rows->rows[0][0].text, "cpu");
  EXPECT_EQ(rows->rows[0][2].integer, 0);
  EXPECT_EQ(rows->rows[1][0].text, "http");
  EXPECT_EQ(rows->rows[1][2].integer, 4);
  EXPECT_EQ(rows->rows[1][3].integer, 1);
  auto latency = report::RunReadOnlyQuery(
      db,
      "SELECT config, context_length, results, ttft_ms_mean > 0, ttft_ms_min <= ttft_ms_max "
      "FROM v_stream_latency ORDER BY context_length");
  ASSERT_TRUE(latency.ok()) << latency.status().ToString();
  ASSERT_EQ(latency->rows.size(), 2u);
  for (const auto& row : latency->rows) {
    EXPECT_THAT(row[0].text, HasSubstr("backend=http:tiny@" + server->url()));
    EXPECT_EQ(row[2].integer, 2);
    EXPECT_EQ(row[3].integer, 1);
    EXPECT_EQ(row[4].integer, 1);
  }
  // nw export: the columns, null where the job did not stream.
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok());
  std::ostringstream out;
  ASSERT_TRUE(report::ExportCampaign(**store, "run", report::ExportFormat::kJsonl, out).ok());
  std::istringstream lines(out.str());
  int streamed = 0, plain = 0;
  for (std::string line; std::getline(lines, line);) {
    const json row = json::parse(line);
    if (row["backend"] == "http") {
      ++streamed;
      EXPECT_GT(row["ttft_ms"].get<double>(), 0);
      EXPECT_GE(row["stream_events"].get<int64_t>(), 1);
      EXPECT_TRUE(row["itl_p95_ms"].is_number());
    } else {
      ++plain;
      EXPECT_TRUE(row["ttft_ms"].is_null());
      EXPECT_TRUE(row["stream_events"].is_null());
    }
  }
  EXPECT_EQ(streamed, 4);
  EXPECT_EQ(plain, 4);
}

// The fault cases that need a server misbehaving on purpose.
class RawFaultTest : public HttpExecutorTest {
 protected:
  void SetUp() override {
    // The job's prompt and expected answer, to script a correct reply.
    auto [job, twin] = Pair("http://127.0.0.1:1");
    auto tok = Tokenizer::Load(model_dir() / "tokenizer.json");
    ASSERT_TRUE(tok.ok());
    NiahSpec ns;
    ns.context_length = job.context_length;
    ns.needle_position = job.needle_position;
    ns.seed = job.HaystackSeed();
    auto prompt = BuildNiahPrompt(*tok, ns);
    ASSERT_TRUE(prompt.ok());
    expected_ = prompt->expected;
  }
  // A correct completion: the expected value, as many prompt tokens as were sent.
  RawReply Good(const RawRequest& req, int prompt_delta = 0) const {
    const json in = json::parse(req.body);
    const json out{{"choices", {{{"text", " " + expected_ + ".\n"}, {"finish_reason", "stop"}}}},
                   {"usage",
                    {{"prompt_tokens", static_cast<int>(in["prompt"].size()) + prompt_delta},
                     {"completion_tokens", 4}}}};
    return JsonReply(200, out.dump());
  }
  // Serves /health, then answers the n-th completion request with script(n, request).
  std::unique_ptr<RawServer> Scripted(std::function<RawReply(int, const RawRequest&)> script) {
    return std::make_unique<RawServer>(
        [this, script, posts = std::make_shared<int>(0)](const RawRequest& req, int) {
          if (req.target == "/health") return JsonReply(200, "{}");
          return script((*posts)++, req);
        });
  }
  JobResult Run(RawServer& raw, HttpExecutor& http, const std::string& settings = "retries: 3",
                const std::string& extra = "probe: true\n") {
    auto [job, twin] = Pair(raw.url(), settings, 200, extra);
    return http.Execute(job, job.Key(), 1);
  }
  // A streamed answer: `body` (server-sent events) with a Content-Length.
  static RawReply SseReply(const std::string& body) {
    RawReply r;
    r.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body;
    return r;
  }

  std::string expected_;
};

RawReply CutShort() {
  RawReply r;
  r.bytes =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n"
      "{\"choices\": [{\"te";
  r.close = true;
  return r;
}
RawReply Hangup() {
  RawReply r;
  r.close = true;
  return r;
}
RawReply Garbage() {
  RawReply r;
  r.bytes = "SMTP READY\r\n\r\n";
  r.close = true;
  return r;
}

TEST_F(RawFaultTest, RetryableFailuresThenAnAnswerEndAsTheAnswer) {
  struct Case {
    std::string name;
    std::function<RawReply()> fault;
    int64_t HttpExecutor::Stats::*counter;
    int64_t tries;  // requests the executor made (the third POST answers)
  };
  // A connection closed without a byte of answer looks like a keep-alive connection the server
  // had dropped: the client tries once more on a fresh one before it counts a failure.
  const std::vector<Case> cases = {
      {"500", [] { return JsonReply(500, R"({"error":{"message":"boom"}})"); },
       &HttpExecutor::Stats::server_errors, 3},
      {"503", [] { return JsonReply(503, R"({"error":{"message":"busy"}})"); },
       &HttpExecutor::Stats::server_errors, 3},
      {"429", [] { return JsonReply(429, R"({"error":{"message":"slow down"}})"); },
       &HttpExecutor::Stats::server_errors, 3},
      {"malformed json", [] { return JsonReply(200, "{\"choices\": [{\"text\": "); },
       &HttpExecutor::Stats::malformed, 3},
      {"not a completion", [] { return JsonReply(200, R"({"object": "list"})"); },
       &HttpExecutor::Stats::malformed, 3},
      {"cut short", CutShort, &HttpExecutor::Stats::transport_errors, 3},
      {"not http", Garbage, &HttpExecutor::Stats::transport_errors, 3},
      {"hang-up", Hangup, &HttpExecutor::Stats::transport_errors, 2},
  };
  for (const Case& c : cases) {
    auto raw =
        Scripted([&](int n, const RawRequest& req) { return n < 2 ? c.fault() : Good(req); });
    HttpExecutor http(FastRetries());
    const JobResult r = Run(*raw, http);
    EXPECT_EQ(r.outcome, Outcome::kPass) << c.name << ": " << r.error_message;
    EXPECT_EQ(raw->requests(), 4) << c.name;  // the health check and three completions
    EXPECT_EQ(http.stats().requests, c.tries) << c.name;
    EXPECT_EQ(http.stats().retries, c.tries - 1) << c.name;
    EXPECT_EQ(http.stats().*(c.counter), c.tries - 1) << c.name;
  }
}

TEST_F(RawFaultTest, RetriesSpentEndAsEngineErrorsNeverMisses) {
  struct Case {
    std::string name;
    std::function<RawReply()> fault;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"500", [] { return JsonReply(500, R"({"error":{"message":"boom"}})"); },
       "answered 500: boom"},
      {"malformed json", [] { return JsonReply(200, "<html>oops</html>"); }, "not JSON"},
      {"cut short", CutShort, "cut short"},
      {"hang-up", Hangup, "closed the connection without answering"},
  };
  for (const Case& c : cases) {
    auto raw = Scripted([&](int, const RawRequest&) { return c.fault(); });
    HttpExecutor http(FastRetries());
    const JobResult r = Run(*raw, http);
    EXPECT_EQ(r.outcome, Outcome::kEngineError) << c.name;
    EXPECT_EQ(r.error_code, "unavailable") << c.name;
    EXPECT_THAT(r.error_message, HasSubstr(c.message)) << c.name;
    EXPECT_THAT(r.error_message, HasSubstr("(4 tries)")) << c.name;
    EXPECT_EQ(http.stats().requests, 4) << c.name;
  }
}

TEST_F(RawFaultTest, RequestErrorsAreNotRetried) {
  struct Case {
    int status;
    std::string code;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {400, "invalid_argument", "prompt too long"},
           {401, "failed_precondition", "check api_key_env / api_key_file"},
           {404, "not_found", "prompt too long"},
       }) {
    auto raw = Scripted([&](int, const RawRequest&) {
      return JsonReply(c.status, R"({"error":{"message":"prompt too long"}})");
    });
    HttpExecutor http(FastRetries());
    const JobResult r = Run(*raw, http);
    EXPECT_EQ(r.outcome, Outcome::kEngineError) << c.status;
    EXPECT_EQ(r.error_code, c.code) << c.status;
    EXPECT_FALSE(r.retryable);
    EXPECT_THAT(r.error_message, HasSubstr(c.message)) << c.status;
    EXPECT_EQ(http.stats().requests, 1) << c.status;
  }
  // A server that does not count the token ids it was sent would make lengths inexact.
  auto raw = Scripted([&](int, const RawRequest& req) { return Good(req, /*prompt_delta=*/1); });
  HttpExecutor http(FastRetries());
  const JobResult r = Run(*raw, http);
  EXPECT_EQ(r.outcome, Outcome::kEngineError);
  EXPECT_EQ(r.error_code, "failed_precondition");
  EXPECT_THAT(r.error_message, HasSubstr("prompt tokens for the 200 token ids sent"));
}

TEST_F(RawFaultTest, TheRequestIsWhatTheCampaignAsked) {
  auto raw = Scripted([&](int, const RawRequest& req) { return Good(req); });
  HttpExecutor http(FastRetries());
  ASSERT_EQ(Run(*raw, http, "headers: {X-Team: nlp}").outcome, Outcome::kPass);
  const std::vector<RawRequest> seen = raw->seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].target, "/health");
  EXPECT_EQ(seen[1].method, "POST");
  EXPECT_EQ(seen[1].target, "/v1/completions");
  EXPECT_EQ(seen[1].headers.at("x-team"), "nlp");
  EXPECT_EQ(seen[1].headers.at("content-type"), "application/json");
  EXPECT_EQ(seen[1].headers.count("authorization"), 0u);
  const json body = json::parse(seen[1].body);
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["prompt"].size(), 200u);
  EXPECT_EQ(body["max_tokens"], 6);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["index_topk"], 16);
  EXPECT_EQ(body["precision"]["name"], "fp32");
  EXPECT_EQ(body["return_indexer_topk"], true);
}

TEST_F(RawFaultTest, SamplingParametersAreSentOnlyWhenTheCampaignSetsThem) {
  auto raw = Scripted([&](int, const RawRequest& req) { return Good(req); });
  HttpExecutor http(FastRetries());
  ASSERT_EQ(Run(*raw, http,
                "sampling: {temperature: 0.7, top_p: 0.9, top_k: 40, seed: 7, "
                "min_tokens: 2}")
                .outcome,
            Outcome::kPass);
  ASSERT_EQ(Run(*raw, http, "retries: 0").outcome, Outcome::kPass);
  const std::vector<RawRequest> seen = raw->seen();
  ASSERT_EQ(seen.size(), 3u);  // one health check, two completions
  const json sampled = json::parse(seen[1].body);
  EXPECT_EQ(sampled["temperature"], 0.7);
  EXPECT_EQ(sampled["top_p"], 0.9);
  EXPECT_EQ(sampled["top_k"], 40);
  EXPECT_EQ(sampled["seed"], 7);
  EXPECT_EQ(sampled["min_tokens"], 2);
  EXPECT_EQ(sampled["max_tokens"], 6);
  EXPECT_EQ(sampled["stream"], false);
  EXPECT_FALSE(sampled.contains("stream_options"));
  const json greedy = json::parse(seen[2].body);
  EXPECT_EQ(greedy["temperature"], 0);
  for (const char* absent : {"top_p", "top_k", "seed", "min_tokens"}) {
    EXPECT_FALSE(greedy.contains(absent)) << absent;
  }
}

TEST_F(RawFaultTest, AStreamIsReadEventByEvent) {
  // CRLF and LF line ends, a comment, a role-only chunk, text split over events, the finish,
  // the usage chunk: read as OpenAI's clients read them.
  const auto chunk = [](const std::string& text, const json& finish = nullptr) {
    return "data: " +
           json{{"choices", {{{"index", 0}, {"text", text}, {"finish_reason", finish}}}}}.dump() +
           "\r\n\r\n";
  };
  auto raw = Scripted([&](int, const RawRequest& req) {
    const json in = json::parse(req.body);
    EXPECT_EQ(in["stream"], true);
    EXPECT_EQ(in["stream_options"]["include_usage"], true);
    EXPECT_THAT(req.headers.at("accept"), HasSubstr("text/event-stream"));
    const std::string usage =
        json{{"choices", json::array()},
             {"usage", {{"prompt_tokens", in["prompt"].size()}, {"completion_tokens", 4}}}}
            .dump();
    return SseReply(": keep-alive\n\n" + chunk(" " + expected_.substr(0, 2)) +
                    chunk(expected_.substr(2)) + chunk(".\n") + chunk("", "stop") +
                    "data: " + usage + "\n\ndata: [DONE]\n\n");
  });
  HttpExecutor http(FastRetries());
  const JobResult r = Run(*raw, http, "stream: true", "");
  ASSERT_EQ(r.outcome, Outcome::kPass) << r.error_message;
  EXPECT_EQ(r.generated_text, " " + expected_ + ".\n");
  EXPECT_EQ(r.generated_tokens, 4);
  ASSERT_TRUE(r.stream.has_value());
  EXPECT_EQ(r.stream->events, 4);  // three with text, the finish
}

TEST_F(RawFaultTest, ABrokenStreamIsRetriedNeverScored) {
  const std::string text_event = "data: {\"choices\": [{\"text\": \"4\"}]}\n\n";
  struct Case {
    std::string name;
    std::string body;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"no [DONE]", text_event, "no data: [DONE] at its end"},
           {"ends inside an event", text_event + "data: [DO", "it ends inside an event"},
           {"not JSON", "data: {oops\n\ndata: [DONE]\n\n", "not a JSON object"},
           {"an event after [DONE]", "data: [DONE]\n\n" + text_event, "an event after"},
           {"an error event", "data: {\"error\": {\"message\": \"deadline passed\"}}\n\n",
            "the stream ended with an error: deadline passed"},
           {"not a stream", "{\"choices\": [{\"text\": \"4\"}]}", "not an event stream"}}) {
    SCOPED_TRACE(c.name);
    auto raw = Scripted([&](int, const RawRequest&) {
      RawReply r = SseReply(c.body);
      if (c.name == "not a stream") {
        r.bytes = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(c.body.size()) + "\r\n\r\n" + c.body;
      }
      return r;
    });
    HttpExecutor http(FastRetries());
    const JobResult r = Run(*raw, http, "stream: true, retries: 1", "");
    EXPECT_EQ(r.outcome, Outcome::kEngineError);
    EXPECT_EQ(r.error_code, "unavailable");
    EXPECT_THAT(r.error_message, HasSubstr(c.message));
    EXPECT_THAT(r.error_message, HasSubstr("(2 tries)"));
    EXPECT_FALSE(r.stream.has_value());
  }
}

TEST_F(RawFaultTest, ApiKeysComeFromTheEnvironmentOrAFileAndGoNowhereElse) {
  ASSERT_EQ(setenv("NW_HTTP_TEST_KEY", "sekrit-123", 1), 0);
  auto raw = Scripted([&](int, const RawRequest& req) { return Good(req); });
  HttpExecutor http(FastRetries());
  auto [job, twin] = Pair(raw->url(), "api_key_env: NW_HTTP_TEST_KEY");
  const JobResult r = http.Execute(job, job.Key(), 1);
  ASSERT_EQ(r.outcome, Outcome::kPass) << r.error_message;
  for (const RawRequest& req : raw->seen()) {
    EXPECT_EQ(req.headers.at("authorization"), "Bearer sekrit-123");
  }
  EXPECT_EQ(r.ToJson().dump().find("sekrit"), std::string::npos);
  EXPECT_EQ(job.ToJson().dump().find("sekrit"), std::string::npos);

  TempDir tmp;
  std::ofstream(tmp.path() / "key") << "  from-a-file\n";
  auto from_file = Scripted([&](int, const RawRequest& req) { return Good(req); });
  HttpExecutor http2(FastRetries());
  auto [job2, twin2] =
      Pair(from_file->url(), "api_key_file: '" + (tmp.path() / "key").string() + "'");
  ASSERT_EQ(http2.Execute(job2, job2.Key(), 1).outcome, Outcome::kPass);
  EXPECT_EQ(from_file->seen().back().headers.at("authorization"), "Bearer from-a-file");

  auto unused = Scripted([&](int, const RawRequest& req) { return Good(req); });
  HttpExecutor http3(FastRetries());
  auto [job3, twin3] = Pair(unused->url(), "api_key_env: NW_HTTP_TEST_UNSET_KEY");
  const JobResult missing = http3.Execute(job3, job3.Key(), 1);
  EXPECT_EQ(missing.outcome, Outcome::kEngineError);
  EXPECT_EQ(missing.error_code, "failed_precondition");
  EXPECT_THAT(missing.error_message, HasSubstr("NW_HTTP_TEST_UNSET_KEY is not set"));
  EXPECT_EQ(unused->requests(), 0);
  ASSERT_EQ(unsetenv("NW_HTTP_TEST_KEY"), 0);
}

TEST_F(RawFaultTest, TheExecutorsOfAWorkerShareOneConcurrencyLimit) {
  auto raw = Scripted([&](int, const RawRequest& req) {
    RawReply r = Good(req);
    r.hang = true;  // held until released
    return r;
  });
  auto pool = std::make_shared<HttpBackendPool>();
  std::vector<std::unique_ptr<HttpExecutor>> slots;
  for (int i = 0; i < 3; ++i) slots.push_back(std::make_unique<HttpExecutor>(FastRetries(pool)));
  auto [job, twin] = Pair(raw->url(), "concurrency: 2");
  std::vector<std::future<JobResult>> results;
  for (auto& slot : slots) {
    results.push_back(std::async(std::launch::async,
                                 [&, e = slot.get()] { return e->Execute(job, job.Key(), 1); }));
  }
  ASSERT_TRUE(WaitFor([&] { return raw->hung() == 2; }));
  ASSERT_TRUE(WaitFor([&] {
    int64_t sent = 0;
    for (auto& s : slots) sent += s->stats().requests;
    return sent == 3;  // the third slot has its request ready, waiting for a connection
  }));
  raw->Release();
  // The third completion arrives (the health check and three completions) and hangs. hung() alone
  // also reads 1 for a moment while Release() answers the first two, and a second Release() then
  // would find nothing held and leave the third hanging.
  ASSERT_TRUE(WaitFor([&] { return raw->requests() == 4 && raw->hung() == 1; }));
  raw->Release();
  for (auto& f : results) EXPECT_EQ(f.get().outcome, Outcome::kPass);
  EXPECT_EQ(raw->max_concurrent(), 2);
  EXPECT_EQ(raw->requests(), 4);  // one health check, three completions
}

}  // namespace
}  // namespace nw
