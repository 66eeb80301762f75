// The dashboard server in-process on a constructed database: every endpoint's answer (the report
// is exactly `nw report --format json`'s), /metrics through promtool, the bearer token, the
// read-only rule, and the bounds on requests and connections.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dashboard/server.h"
#include "report/report.h"
#include "tests/dashboard/dashboard_test_util.h"
#include "tests/db/campaign_fixture.h"

namespace nw::dashboard {
namespace {

using dashboard_test::Get;
using dashboard_test::Promtool;
using dashboard_test::Raw;
using dashboard_test::Request;
using dashboard_test::StatusOf;
using json = nlohmann::json;
using testing_db::CampaignBuilder;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;
constexpr const char* kToken = "s3cret-token-0123456789";

std::string FileBytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class DashboardServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = dir_.File("nw.db");
    auto s = Store::Open(db_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    {
      // "release": found everywhere; "candidate": loses from 4,096; an engine error and a
      // pending job.
      CampaignBuilder base(**s, "release");
      for (int64_t len : {1024, 2048, 4096}) {
        for (double pos : {0.0, 0.5, 1.0}) base.Cell(len, pos, Repeat(P, 4));
      }
      base.Commit();
      CampaignBuilder cand(**s, "candidate \"x\"");
      for (int64_t len : {1024, 2048}) {
        for (double pos : {0.0, 0.5, 1.0}) cand.Cell(len, pos, Repeat(P, 4));
      }
      for (double pos : {0.0, 0.5, 1.0}) cand.Cell(4096, pos, Repeat(M, 4));
      cand.Cell(8192, 0.0, {Outcome::kEngineError}).Pending(8192, 0.5, 0);
      cand.Commit();
      auto b = (*s)->SetBaseline("release-1", base.id(), "", 5000);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      WorkerRecord w;
      w.id = "w1";
      w.host = "host-a";
      w.device = "cpu";
      w.state = "gone";
      w.first_seen_ms = 1000;
      w.last_seen_ms = 4000;
      ASSERT_TRUE((*s)->UpsertWorker(w).ok());
    }
    LiveWorker lw{"w-live", "host-b", "cpu", {"cpu"},      2,           1,
                  false,    300,      "",    std::nullopt, std::nullopt};
    live_.Publish({lw}, {{"committed", 5}}, 1000);
    live_.ObserveCommit(0.01);
  }

  std::unique_ptr<DashboardServer> Start(DashboardOptions o = {}) {
    o.listen = o.listen == "127.0.0.1:8080" ? "127.0.0.1:0" : o.listen;
    o.db_file = db_;
    o.live = &live_;
    auto server = DashboardServer::Start(std::move(o));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(*server) : nullptr;
  }

  TempDir dir_;
  std::filesystem::path db_;
  LiveMetrics live_;
};

TEST_F(DashboardServerTest, ReportIsNwReportJson) {
  auto server = Start();
  ASSERT_TRUE(server);
  auto r = Get(server->port(), "/api/report?campaign=candidate+%22x%22");
  ASSERT_EQ(r.status, 200) << r.body << r.error;
  EXPECT_EQ(r.headers["Content-Type"], "application/json");
  auto ro = Store::Open(db_, Store::Mode::kReadOnly);
  ASSERT_TRUE(ro.ok());
  auto expected = report::LoadCampaignReport(**ro, "candidate \"x\"");
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(json::parse(r.body), report::RenderJson(*expected));
  EXPECT_NE(r.body.find("lost at 4,096"), std::string::npos) << r.body;
  auto missing = Get(server->port(), "/api/report?campaign=nope");
  EXPECT_EQ(missing.status, 404) << missing.body;
  EXPECT_NE(missing.body.find("nope"), std::string::npos);
  EXPECT_EQ(Get(server->port(), "/api/report").status, 400);
  EXPECT_EQ(Get(server->port(), "/api/report?campaign=%zz").status, 400);
}

TEST_F(DashboardServerTest, CampaignsWorkersFailuresGates) {
  auto server = Start();
  ASSERT_TRUE(server);
  auto c = Get(server->port(), "/api/campaigns");
  ASSERT_EQ(c.status, 200) << c.body;
  const json cj = json::parse(c.body);
  ASSERT_EQ(cj.size(), 2u);
  EXPECT_EQ(cj[1]["name"], "candidate \"x\"");
  EXPECT_EQ(cj[1]["progress"]["total"], 38);  // 4 x 9 cells, the error, the pending job
  EXPECT_EQ(cj[1]["progress"]["done"], 37);
  EXPECT_EQ(cj[1]["progress"]["queued"], 1);
  EXPECT_EQ(cj[1]["run_state"], nullptr);
  // The results were written at t = 4 s of 1970: nothing in the last five minutes.
  EXPECT_EQ(cj[1]["eta_s"], nullptr);
  EXPECT_EQ(cj[0]["eta_s"], 0);  // nothing left to run

  auto w = Get(server->port(), "/api/workers");
  ASSERT_EQ(w.status, 200) << w.body;
  const json wj = json::parse(w.body);
  ASSERT_EQ(wj["live"].size(), 1u);
  EXPECT_EQ(wj["live"][0]["id"], "w-live");
  EXPECT_EQ(wj["live"][0]["leases"], 1);
  EXPECT_EQ(wj["live"][0]["gpu"], nullptr);
  ASSERT_EQ(wj["recorded"].size(), 1u);
  EXPECT_EQ(wj["recorded"][0]["state"], "gone");

  auto f = Get(server->port(), "/api/failures?limit=5");
  ASSERT_EQ(f.status, 200) << f.body;
  const json fj = json::parse(f.body);
  ASSERT_EQ(fj["failures"].size(), 1u) << f.body;
  EXPECT_EQ(fj["failures"][0]["kind"], "engine_error");
  EXPECT_EQ(fj["failures"][0]["error_message"], "simulated");
  EXPECT_EQ(fj["failures"][0]["campaigns"], "candidate \"x\"");
  EXPECT_EQ(Get(server->port(), "/api/failures?limit=-1").status, 400);

  // The candidate gated against the release baseline: it lost 4,096.
  auto g = Get(server->port(), "/api/gates?campaign=candidate%20%22x%22");
  ASSERT_EQ(g.status, 200) << g.body;
  const json gj = json::parse(g.body);
  ASSERT_EQ(gj["gates"].size(), 1u) << g.body;
  EXPECT_EQ(gj["gates"][0]["baseline"], "release-1");
  EXPECT_EQ(gj["gates"][0]["exit_code"], 1) << g.body;
  EXPECT_GE(gj["gates"][0]["regressions"].get<int>(), 1);
  // A campaign is not gated against its own baseline.
  auto own = Get(server->port(), "/api/gates?campaign=release");
  EXPECT_EQ(json::parse(own.body)["gates"].size(), 0u);
}

TEST_F(DashboardServerTest, MetricsParseWithPromtool) {
  auto server = Start();
  ASSERT_TRUE(server);
  auto m = Get(server->port(), "/metrics");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("nw_campaign_jobs{campaign=\"candidate \\\"x\\\"\",state=\"queued\"} 1\n"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("nw_workers_connected 1\n"), std::string::npos);
  EXPECT_NE(m.body.find("nw_commit_seconds_count 1\n"), std::string::npos);
  auto [rc, out] = Promtool(m.body, dir_.path());
  if (rc == -1) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out << "\n" << m.body;
}

TEST_F(DashboardServerTest, PageIsSelfContained) {
  auto server = Start();
  ASSERT_TRUE(server);
  auto p = Get(server->port(), "/");
  ASSERT_EQ(p.status, 200);
  EXPECT_EQ(p.headers["Content-Type"], "text/html; charset=utf-8");
  EXPECT_NE(p.headers["Content-Security-Policy"].find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(p.body, std::string(DashboardPage()));
  EXPECT_EQ(p.body.rfind("<!DOCTYPE html>", 0), 0u);
  // Nothing is fetched from anywhere else: no absolute URLs, no external scripts or styles.
  for (const char* bad : {"http:", "https:", "src=", "<link", "@import", "url("}) {
    EXPECT_EQ(p.body.find(bad), std::string::npos) << bad;
  }
}

TEST_F(DashboardServerTest, ReadOnlyAndBounded) {
  DashboardOptions o;
  o.max_connections = 3;
  o.read_timeout_ms = 60'000;
  auto server = Start(o);
  ASSERT_TRUE(server);
  const uint16_t port = server->port();
  const std::string db_before = FileBytes(db_);
  // Only GET.
  for (auto verb : {boost::beast::http::verb::post, boost::beast::http::verb::put,
                    boost::beast::http::verb::delete_}) {
    auto r = Request(port, verb, "/api/campaigns");
    EXPECT_EQ(r.status, 405) << r.body << r.error;
    EXPECT_EQ(r.headers["Allow"], "GET");
  }
  // No body, however announced.
  EXPECT_EQ(StatusOf(Raw(
                port, "GET /api/campaigns HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")),
            413);
  // URL and header sizes.
  EXPECT_EQ(Get(port, "/api/campaigns?x=" + std::string(3000, 'a')).status, 414);
  EXPECT_EQ(StatusOf(Raw(port, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'a') +
                                   "\r\n\r\n")),
            431);
  EXPECT_EQ(StatusOf(Raw(port, "NOT HTTP\r\n\r\n")), 400);
  EXPECT_EQ(Get(port, "/api/nothing").status, 404);
  // Connections: three idle ones fill the cap; the fourth is answered 503 and closed.
  {
    boost::asio::io_context ioc;
    std::vector<boost::asio::ip::tcp::socket> idle;
    for (int i = 0; i < 3; ++i) {
      idle.emplace_back(ioc);
      idle.back().connect({boost::asio::ip::make_address("127.0.0.1"), port});
    }
    // The server counts a connection once it has accepted it: ask until it has all three.
    int status = 0;
    for (int i = 0; i < 200 && status != 503; ++i) {
      status = StatusOf(Raw(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
      if (status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(status, 503);
  }
  // Once they are gone, requests are served again.
  int status = 0;
  for (int i = 0; i < 200 && status != 200; ++i) {
    status = Get(port, "/health").status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200);
  EXPECT_EQ(FileBytes(db_), db_before);
}

TEST_F(DashboardServerTest, IdleConnectionsAreClosedAtTheDeadline) {
  DashboardOptions o;
  o.read_timeout_ms = 200;
  auto server = Start(o);
  ASSERT_TRUE(server);
  // Half a request, then nothing: the server closes the connection without an answer.
  const std::string got = Raw(server->port(), "GET /api/campaigns HTTP/1.1\r\nHo");
  EXPECT_EQ(got, "");
}

TEST_F(DashboardServerTest, BearerToken) {
  DashboardOptions o;
  o.token = kToken;
  auto server = Start(o);
  ASSERT_TRUE(server);
  const uint16_t port = server->port();
  // The page and /health carry no data.
  EXPECT_EQ(Get(port, "/").status, 200);
  EXPECT_EQ(Get(port, "/health").status, 200);
  for (const char* path : {"/metrics", "/api/campaigns", "/api/workers", "/api/failures",
                           "/api/report?campaign=release", "/api/gates?campaign=release"}) {
    auto none = Get(port, path);
    EXPECT_EQ(none.status, 401) << path;
    EXPECT_EQ(none.headers["WWW-Authenticate"], "Bearer");
    EXPECT_EQ(Get(port, path, {{"Authorization", std::string("Bearer ") + kToken + "x"}}).status,
              401)
        << path;
    EXPECT_EQ(Get(port, path, {{"Authorization", std::string("Basic ") + kToken}}).status, 401);
    EXPECT_EQ(Get(port, path, {{"Authorization", std::string("Bearer ") + kToken}}).status, 200)
        << path;
  }
}

// The page in headless Chromium against this database: both campaigns' heatmaps and boundary
// sentences, the candidate's gate against the release baseline, the engine error among the recent
// failures, the live worker. (tests/dashboard/dashboard_browser_test.cc runs it against real
// coordinator and worker processes.)
TEST_F(DashboardServerTest, PageRendersGatesAndFailuresInChromium) {
  const std::string chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium)) GTEST_SKIP() << chromium << " is not installed";
  DashboardOptions o;
  o.token = kToken;  // the page takes it from the URL fragment
  auto server = Start(o);
  ASSERT_TRUE(server);
  const auto out = dir_.File("dom.html");
  const auto log = dir_.File("chromium.log");
  const std::string cmd =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --disable-dev-shm-usage --virtual-time-budget=3000 --user-data-dir=" +
      dir_.File("profile").string() + " --dump-dom '" + server->url() + "#token=" + kToken +
      "' > " + out.string() + " 2> " + log.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << FileBytes(log);
  const std::string dom = FileBytes(out);
  EXPECT_NE(dom.find("<span id=\"status\" class=\"ok\">live</span>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<table class=\"heatmap\" data-config=\"topk=16 precision=fp32 "
                     "backend=cpu task=niah-single haystack=noise\">"),
            std::string::npos);
  // The candidate's 4,096 row: no passes in four answers, red.
  EXPECT_NE(dom.find("data-length=\"4096\" data-position=\"0.5\" data-trials=\"4\" "
                     "data-passes=\"0\" data-pending=\"0\" style=\"background: rgb(215, 48, "
                     "39);"),
            std::string::npos)
      << dom;
  EXPECT_NE(dom.find("lost at 4,096 (pass 0/12"), std::string::npos);
  EXPECT_NE(dom.find("<div class=\"gate fail\" data-baseline=\"release-1\">gate against "
                     "baseline <code>release-1</code>: fail: regression"),
            std::string::npos)
      << dom;
  EXPECT_NE(dom.find(">engine_error</td><td class=\"reason\">resource_exhausted: simulated</td>"),
            std::string::npos)
      << dom;
  EXPECT_NE(dom.find("data-worker=\"w-live\""), std::string::npos);
}

TEST(DashboardStart, BeyondLoopbackNeedsAToken) {
  TempDir dir;
  { ASSERT_TRUE(Store::Open(dir.File("nw.db")).ok()); }
  DashboardOptions o;
  o.listen = "0.0.0.0:0";
  o.db_file = dir.File("nw.db");
  auto refused = DashboardServer::Start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--http-token-file"), std::string::npos);
  EXPECT_TRUE(*IsLoopbackListen("127.0.0.1:80"));
  EXPECT_TRUE(*IsLoopbackListen("[::1]:80"));
  EXPECT_TRUE(*IsLoopbackListen("localhost:80"));
  EXPECT_FALSE(*IsLoopbackListen("0.0.0.0:80"));
  EXPECT_FALSE(IsLoopbackListen("nohost").ok());
  EXPECT_FALSE(IsLoopbackListen("127.0.0.1:99999").ok());
  // A missing database is an error, never created.
  DashboardOptions m;
  m.listen = "127.0.0.1:0";
  m.db_file = dir.File("missing.db");
  EXPECT_FALSE(DashboardServer::Start(m).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File("missing.db")));
}

TEST(DashboardToken, FileAndComparison) {
  TempDir dir;
  std::ofstream(dir.File("ok")) << "  " << kToken << "  \nsecond line ignored\n";
  std::ofstream(dir.File("short")) << "abc\n";
  std::ofstream(dir.File("space")) << "abcdefgh ijklmnopqrs\n";
  auto ok = ReadTokenFile(dir.File("ok"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, kToken);
  EXPECT_FALSE(ReadTokenFile(dir.File("short")).ok());
  EXPECT_FALSE(ReadTokenFile(dir.File("space")).ok());
  EXPECT_FALSE(ReadTokenFile(dir.File("missing")).ok());
  EXPECT_TRUE(TokenMatches(kToken, kToken));
  EXPECT_FALSE(TokenMatches("s3cret-token-0123456780", kToken));
  EXPECT_FALSE(TokenMatches("", kToken));
  EXPECT_FALSE(TokenMatches(std::string(kToken) + "x", kToken));
}

}  // namespace
}  // namespace nw::dashboard
