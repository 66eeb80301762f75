// The distributed commands through the real `nw` binary: a daemon, worker processes, submit,
// status, pause / resume / cancel, keygen and CURVE across processes, and the refusals (plain
// non-loopback endpoints, a second coordinator on one database, `nw run` and a daemon on one
// database, GPU flags without a CUDA engine backend, bad test-executor specs), and `nw serve`
// stopped by a signal.
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "tests/dist/dist_test_util.h"

namespace nw {
namespace {

using namespace nw::dist_test;

const std::vector<std::string> kFast = {"--heartbeat-ms", "100"};

std::vector<std::string> Worker(int slots, const std::string& sleep = "sleep:2") {
  return {"--heartbeat-ms", "100", "--slots", std::to_string(slots), "--test-executor", sleep};
}

TEST(CliDistTest, SubmitWorkStatusPauseResumeCancel) {
  Workspace ws("cli");
  ASSERT_TRUE(ws.MakeModel());
  auto coordinator = ws.StartCoordinator(kFast);
  const std::string c = " --coordinator " + ws.endpoint();
  CommandResult sub =
      Sh(ws.Nw("submit " + ws.Campaign("first", 4, 5, 2).string() + c + " --priority 2"));
  ASSERT_EQ(sub.exit_code, 0) << sub.out;
  EXPECT_NE(sub.out.find("submitted campaign 'first'"), std::string::npos) << sub.out;
  EXPECT_NE(sub.out.find("40 jobs, 0 already done, 40 to run"), std::string::npos) << sub.out;

  ASSERT_EQ(Sh(ws.Nw("pause first" + c)).exit_code, 0);
  CommandResult st = Sh(ws.Nw("status first" + c));
  ASSERT_EQ(st.exit_code, 0) << st.out;
  EXPECT_NE(st.out.find("paused"), std::string::npos) << st.out;

  auto w = ws.StartWorker("cli-w", Worker(2));
  Db db(ws.db());
  ASSERT_TRUE(WaitUntil(
      [&] { return Sh(ws.Nw("status" + c)).out.find("cli-w") != std::string::npos; }, 20'000));
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM results"), 0);  // paused: nothing ran
  ASSERT_EQ(Sh(ws.Nw("resume first" + c)).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return db.Int("SELECT COUNT(*) FROM results") == 40; }, 30'000))
      << coordinator->Log();
  ASSERT_TRUE(WaitUntil(
      [&] { return Sh(ws.Nw("status first" + c)).out.find("finished") != std::string::npos; },
      20'000));
  ExpectEveryJobExactlyOnce(db, "first", 40);

  // The local (database) status agrees.
  CommandResult local = Sh(ws.Nw("status first"));
  ASSERT_EQ(local.exit_code, 0) << local.out;
  EXPECT_NE(local.out.find("first"), std::string::npos);

  // Cancel a campaign nobody works on; resuming it is refused; unknown names are errors.
  w->Signal(SIGTERM);
  ASSERT_TRUE(w->WaitExit(20'000));
  EXPECT_EQ(w->exit_code(), 0) << w->Log();
  // Two of its four jobs are jobs of "first" too (same content, same key): already done.
  CommandResult second = Sh(ws.Nw("submit " + ws.Campaign("second", 2, 2, 1).string() + c));
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_NE(second.out.find("4 jobs, 2 already done, 2 to run"), std::string::npos) << second.out;
  CommandResult cancel = Sh(ws.Nw("cancel second" + c));
  ASSERT_EQ(cancel.exit_code, 0) << cancel.out;
  EXPECT_NE(cancel.out.find("cancelled (2 queued jobs taken out"), std::string::npos) << cancel.out;
  CommandResult resume = Sh(ws.Nw("resume second" + c));
  EXPECT_EQ(resume.exit_code, 1) << resume.out;
  EXPECT_NE(resume.out.find("submit it again"), std::string::npos) << resume.out;
  EXPECT_EQ(Sh(ws.Nw("pause nosuch" + c)).exit_code, 1);
  EXPECT_EQ(Sh(ws.Nw("status nosuch" + c)).exit_code, 2);

  // SIGTERM stops the daemon cleanly.
  coordinator->Signal(SIGTERM);
  ASSERT_TRUE(coordinator->WaitExit(20'000));
  EXPECT_EQ(coordinator->exit_code(), 0) << coordinator->Log();
  // Nobody answers now: a clear error, not a hang.
  CommandResult gone = Sh(ws.Nw("status" + c + " --timeout-ms 200"));
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.out.find("no reply from a coordinator"), std::string::npos) << gone.out;
}

// SIGTERM (what Slurm sends at scancel, preemption, the time limit) drains a worker: its queued
// job goes back at once, its running job gets --drain-s and is then handed back, and the process
// exits 0 a few seconds later without waiting for the engine. Another worker does everything
// exactly once. docs/slurm.md; the same through a real Slurm: tests/slurm/.
TEST(CliDistTest, SigtermDrainsAWorkerWithinItsGrace) {
  Workspace ws("drain");
  ASSERT_TRUE(ws.MakeModel());
  auto coordinator = ws.StartCoordinator({"--heartbeat-ms", "100", "--retry-backoff-ms", "50"});
  const std::string c = " --coordinator " + ws.endpoint();
  ASSERT_EQ(Sh(ws.Nw("submit " + ws.Campaign("drain", 2, 3, 1).string() + c)).exit_code, 0);
  Db db(ws.db());
  // A worker whose jobs never finish in time: one running, one queued (prefetch).
  auto slow = ws.StartWorker("slow", {"--heartbeat-ms", "100", "--slots", "1", "--prefetch", "1",
                                      "--test-executor", "sleep:600000", "--drain-s", "1"});
  ASSERT_TRUE(WaitUntil(
      [&] { return db.Int("SELECT COUNT(*) FROM attempts WHERE status = 'running'") == 2; },
      20'000))
      << coordinator->Log();
  const auto t0 = std::chrono::steady_clock::now();
  slow->Signal(SIGTERM);
  ASSERT_TRUE(slow->WaitExit(20'000)) << slow->Log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
  EXPECT_EQ(slow->exit_code(), 0) << slow->Log();
  const std::string log = slow->Log();
  EXPECT_NE(log.find("draining: 1 queued jobs handed back"), std::string::npos) << log;
  EXPECT_NE(log.find("drain grace over: 1 running jobs handed back"), std::string::npos) << log;
  EXPECT_NE(log.find("exiting without them"), std::string::npos) << log;
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM attempts WHERE status = 'running'"), 0);

  auto fast = ws.StartWorker("fast", Worker(2));
  ASSERT_TRUE(WaitUntil([&] { return db.Int("SELECT COUNT(*) FROM results") == 6; }, 30'000))
      << coordinator->Log();
  ExpectEveryJobExactlyOnce(db, "drain", 6);
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM jobs WHERE state = 'failed'"), 0);
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM attempts WHERE error_message LIKE "
                   "'%draining and handed back%'"),
            1);
}

TEST(CliDistTest, WorkersOnlyGetJobsOfTheModelsTheyList) {
  Workspace ws("models");
  ASSERT_TRUE(ws.MakeModel());
  // Another model: same architecture, other weights, so another digest.
  CommandResult other = Sh(std::string(NW_BIN) + " model init --config " + NW_SOURCE_DIR +
                           "/models/configs/tiny-a.json --seed 8 " + (ws.dir() / "other").string());
  ASSERT_EQ(other.exit_code, 0) << other.out;
  auto coordinator = ws.StartCoordinator(kFast);
  const std::string c = " --coordinator " + ws.endpoint();
  ASSERT_EQ(Sh(ws.Nw("submit " + ws.Campaign("m", 3, 3, 2).string() + c)).exit_code, 0);
  std::vector<std::string> wrong = Worker(2);
  wrong.insert(wrong.end(), {"--model", (ws.dir() / "other").string()});
  auto w_other = ws.StartWorker("has-other", wrong);
  ASSERT_TRUE(WaitUntil(
      [&] { return Sh(ws.Nw("status" + c)).out.find("has-other") != std::string::npos; }, 20'000));
  std::vector<std::string> right = Worker(2);
  right.insert(right.end(), {"--model", (ws.dir() / "model").string()});
  auto w_right = ws.StartWorker("has-model", right);
  Db db(ws.db());
  ASSERT_TRUE(WaitUntil([&] { return db.Int("SELECT COUNT(*) FROM results") == 18; }, 30'000))
      << coordinator->Log();
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM attempts WHERE worker_id = 'has-other'"), 0);
  ExpectEveryJobExactlyOnce(db, "m", 18);
  CommandResult bad = Sh(ws.Nw("worker" + c + " --model " + (ws.dir() / "nope").string()));
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
}

TEST(CliDistTest, RefusalsAndBadArguments) {
  Workspace ws("refuse");
  // Plain TCP beyond loopback needs --insecure or CURVE keys.
  CommandResult open = Sh(ws.Nw("coordinator --listen tcp://0.0.0.0:0"));
  EXPECT_EQ(open.exit_code, 2) << open.out;
  EXPECT_NE(open.out.find("refusing to listen"), std::string::npos) << open.out;
  // One coordinator per database.
  auto first = ws.StartCoordinator(kFast);
  CommandResult second = Sh(ws.Nw("coordinator --listen tcp://127.0.0.1:0"));
  EXPECT_EQ(second.exit_code, 2) << second.out;
  EXPECT_NE(second.out.find("another coordinator serves"), std::string::npos) << second.out;
  // GPU flags: refused, with the reason, where no cuda* backend can run (never a silent CPU
  // fallback); worker/gpu_plan.h, tests/worker/gpu_plan_test.cc.
  CommandResult version = Sh(std::string(NW_BIN) + " version");
  if (version.out.find("cuda") == std::string::npos) {
    for (const std::string flags : {"--gpu 0", "--gpus all", "--gpus 0,1", "--gpu-visible"}) {
      CommandResult gpu = Sh(ws.Nw("worker --coordinator " + ws.endpoint() + " " + flags));
      EXPECT_EQ(gpu.exit_code, 2) << flags << ": " << gpu.out;
      EXPECT_NE(gpu.out.find("cannot run jobs on a GPU"), std::string::npos) << gpu.out;
      EXPECT_NE(gpu.out.find("use --cpu"), std::string::npos) << gpu.out;
    }
  }
  CommandResult bad = Sh(ws.Nw("worker --coordinator " + ws.endpoint() + " --test-executor nap:5"));
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("expected sleep:MS"), std::string::npos) << bad.out;
  EXPECT_EQ(Sh(ws.Nw("worker --coordinator " + ws.endpoint() + " --cpu --gpu 1")).exit_code, 2);
  // The test double is not advertised in --help.
  EXPECT_EQ(Sh(std::string(NW_BIN) + " worker --help").out.find("test-executor"),
            std::string::npos);
  for (const std::string sub : {"coordinator", "submit", "worker", "keygen", "cancel", "pause",
                                "resume", "slurm submit-workers"}) {
    CommandResult h = Sh(std::string(NW_BIN) + " " + sub + " --help");
    EXPECT_EQ(h.exit_code, 0) << sub << ": " << h.out;
  }
  // Submitting to nobody fails after its tries.
  CommandResult nobody = Sh(ws.Nw("cancel x --coordinator tcp://127.0.0.1:1 --timeout-ms 100"));
  EXPECT_EQ(nobody.exit_code, 1) << nobody.out;
}

// One writer per database: `nw run` refuses a database a running daemon serves, and the daemon
// refuses one that a running `nw run` writes; each names the other and its pid.
TEST(CliDistTest, RunAndCoordinatorRefuseEachOthersDatabase) {
  Workspace ws("lock");
  ASSERT_TRUE(ws.MakeModel());
  const std::string small = ws.Campaign("small", 2, 2, 1).string();
  {
    auto daemon = ws.StartCoordinator(kFast);
    CommandResult run = Sh(ws.Nw("run " + small + " --no-report"));
    EXPECT_EQ(run.exit_code, 2) << run.out;
    EXPECT_NE(run.out.find("nw run: refusing to write to " + ws.db().string()), std::string::npos)
        << run.out;
    EXPECT_NE(run.out.find("a running `nw coordinator` daemon (pid " +
                           std::to_string(daemon->pid()) + ")"),
              std::string::npos)
        << run.out;
    EXPECT_NE(run.out.find("nw submit"), std::string::npos) << run.out;
    // Nothing was written: the campaign is not in the database.
    Db db(ws.db());
    EXPECT_EQ(db.Int("SELECT COUNT(*) FROM campaigns"), 0);
    daemon->Signal(SIGTERM);
    ASSERT_TRUE(daemon->WaitExit(20'000));
    EXPECT_EQ(daemon->exit_code(), 0) << daemon->Log();
  }
  // A long run (hundreds of real engine jobs on the tiny model) holds the database.
  const std::string big = ws.Campaign("big", 40, 10, 2).string();
  Child run({NW_BIN, "--db", ws.db().string(), "run", big, "--no-report"}, ws.log("run"));
  const fs::path lock = ws.db().string() + ".coordinator.lock";
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::ifstream in(lock);
        std::string line;
        return (in && std::getline(in, line) && line.rfind("role=run", 0) == 0) || run.Exited();
      },
      30'000));
  ASSERT_FALSE(run.Exited()) << run.Log();
  // Wait until it runs jobs (its signal handling is set up by then: SIGINT below stops it).
  Db db(ws.db());
  ASSERT_TRUE(WaitUntil([&] { return db.Int("SELECT COUNT(*) FROM attempts") > 0 || run.Exited(); },
                        60'000));
  ASSERT_FALSE(run.Exited()) << run.Log();
  CommandResult daemon = Sh(ws.Nw("coordinator --listen tcp://127.0.0.1:0"));
  EXPECT_EQ(daemon.exit_code, 2) << daemon.out;
  EXPECT_NE(daemon.out.find("nw coordinator: refusing to serve " + ws.db().string()),
            std::string::npos)
      << daemon.out;
  EXPECT_NE(daemon.out.find("a running `nw run` (pid " + std::to_string(run.pid()) + ")"),
            std::string::npos)
      << daemon.out;
  EXPECT_FALSE(run.Exited()) << "the run ended before the daemon was tried: " << run.Log();
  // Interrupted, the run stops (130) and releases the database: now the daemon starts.
  run.Signal(SIGINT);
  ASSERT_TRUE(run.WaitExit(60'000));
  EXPECT_EQ(run.exit_code(), 130) << run.Log();
  auto after = ws.StartCoordinator(kFast);
  EXPECT_FALSE(after->Exited()) << after->Log();
}

TEST(CliDistTest, CurveAcrossProcesses) {
  Workspace ws("curve");
  ASSERT_TRUE(ws.MakeModel());
  const fs::path k = ws.dir() / "keys";
  fs::create_directories(k / "allowed");
  for (const std::string name : {"server", "worker", "client", "stranger"}) {
    CommandResult r = Sh(std::string(NW_BIN) + " keygen " + (k / name).string());
    ASSERT_EQ(r.exit_code, 0) << r.out;
    // The public key is the last line printed: 40 Z85 characters.
    ASSERT_GE(r.out.size(), 41u) << r.out;
    EXPECT_EQ(r.out.substr(r.out.size() - 41),
              Sh("tail -n1 " + (k / (name + ".pub")).string()).out.substr(13))
        << r.out;
  }
  EXPECT_EQ(Sh(std::string(NW_BIN) + " keygen " + (k / "server").string()).exit_code, 2);
  fs::copy(k / "worker.pub", k / "allowed" / "worker.pub");
  fs::copy(k / "client.pub", k / "allowed" / "client.pub");
  // With keys, any address is allowed; loopback keeps the test on this host.
  auto coordinator =
      ws.StartCoordinator({"--heartbeat-ms", "100", "--curve-key", (k / "server.key").string(),
                           "--allow", (k / "allowed").string()});
  const std::string server_key = " --server-key " + (k / "server.pub").string();
  const std::string c = " --coordinator " + ws.endpoint();
  CommandResult sub = Sh(ws.Nw("submit " + ws.Campaign("secret", 3, 3, 1).string() + c +
                               server_key + " --curve-key " + (k / "client.key").string()));
  ASSERT_EQ(sub.exit_code, 0) << sub.out << coordinator->Log();
  // A key that is not on the allow-list, and no key at all, get no answer.
  CommandResult stranger = Sh(ws.Nw("status" + c + server_key + " --curve-key " +
                                    (k / "stranger.key").string() + " --timeout-ms 300"));
  EXPECT_EQ(stranger.exit_code, 1) << stranger.out;
  CommandResult plain = Sh(ws.Nw("status" + c + " --timeout-ms 300"));
  EXPECT_EQ(plain.exit_code, 1) << plain.out;
  auto w = ws.StartWorker(
      "curve-w", {"--heartbeat-ms", "100", "--test-executor", "sleep:1", "--server-key",
                  (k / "server.pub").string(), "--curve-key", (k / "worker.key").string()});
  Db db(ws.db());
  ASSERT_TRUE(WaitUntil([&] { return db.Int("SELECT COUNT(*) FROM results") == 9; }, 30'000))
      << coordinator->Log() << w->Log();
  ExpectEveryJobExactlyOnce(db, "secret", 9);
  EXPECT_NE(coordinator->Log().find("denied CURVE client"), std::string::npos);
}

// A campaign with `search:` through the real binary: `nw submit` to a daemon served by a CPU
// worker (the real engine, models/tiny-v4) ends with the job set and the boundary that `nw run`
// of the same campaign ends with in another database; `nw status --coordinator` shows the
// search's progress. The search itself is tests/coordinator/search_daemon_test.cc.
TEST(CliDistTest, ASearchCampaignOnTheDaemonEndsAsNwRunEnds) {
  Workspace ws("search");
  const fs::path yaml = ws.dir() / "search.yaml";
  std::ofstream(yaml) << "name: search\nmodel: " << NW_SOURCE_DIR
                      << "/models/tiny-v4\ntask: niah-single\nhaystack: noise\nmatrix:\n"
                         "  context_length: [256, 512, 1024, 2048]\n"
                         "  needle_position: [0.0, 1.0]\n  topk: 64\n  precision: fp32\n"
                         "  backend: cpu\ntrials: 2\nseed: 0\n"
                         "generation: {max_new_tokens: 16}\n"
                         "search: {boundary: {first_trials: 1}}\n";
  const fs::path run_db = ws.dir() / "run.db";
  CommandResult run = Sh(std::string(NW_BIN) + " --db " + run_db.string() + " run " +
                         yaml.string() + " --no-report --workers 2");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("boundary search:"), std::string::npos) << run.out;

  auto coordinator = ws.StartCoordinator(kFast);
  const std::string c = " --coordinator " + ws.endpoint();
  CommandResult sub = Sh(ws.Nw("submit " + yaml.string() + c));
  ASSERT_EQ(sub.exit_code, 0) << sub.out;
  EXPECT_NE(sub.out.find("(boundary search so far, of 16 in the grid)"), std::string::npos)
      << sub.out;
  auto w = ws.StartWorker("cpu", {"--heartbeat-ms", "100", "--slots", "2"});
  // The campaign's state column says finished (the search line says "lines finished" before).
  const std::regex finished(R"(\nsearch +finished )");
  ASSERT_TRUE(WaitUntil(
      [&] { return std::regex_search(Sh(ws.Nw("status search" + c)).out, finished); }, 120'000))
      << coordinator->Log() << w->Log();
  CommandResult st = Sh(ws.Nw("status search" + c));
  EXPECT_NE(st.out.find("boundary search: "), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("of 16 grid jobs asked for, 2 of 2 lines finished"), std::string::npos)
      << st.out;
  w->Signal(SIGTERM);
  ASSERT_TRUE(w->WaitExit(20'000));
  coordinator->Signal(SIGTERM);
  ASSERT_TRUE(coordinator->WaitExit(20'000));

  const std::string keys =
      "SELECT group_concat(job_key, ',') FROM (SELECT job_key FROM campaign_jobs cj JOIN "
      "campaigns c ON c.id = cj.campaign_id WHERE c.name = 'search' ORDER BY job_key)";
  const std::string bounds =
      "SELECT group_concat(config || ':' || ifnull(l_pass, '-') || ':' || ifnull(l_fail, '-'), "
      "',') FROM (SELECT b.* FROM v_boundary b JOIN campaigns c ON c.id = b.campaign_id WHERE "
      "c.name = 'search' ORDER BY config)";
  Db daemon_db(ws.db());
  Db nw_run_db(run_db);
  const auto daemon_keys = daemon_db.Rows(keys);
  ASSERT_FALSE(daemon_keys.empty());
  EXPECT_FALSE(daemon_keys[0][0].empty());
  EXPECT_EQ(daemon_keys, nw_run_db.Rows(keys));
  EXPECT_EQ(daemon_db.Rows(bounds), nw_run_db.Rows(bounds));
  EXPECT_LT(daemon_db.Int("SELECT COUNT(*) FROM campaign_jobs"), 16);  // not the whole grid
  ExpectEveryJobExactlyOnce(daemon_db, "search",
                            daemon_db.Int("SELECT COUNT(*) FROM campaign_jobs"));
}

// Whether a TCP connection to 127.0.0.1:port is accepted.
bool Connects(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// SIGTERM and SIGINT stop `nw serve` (common/signal_stopper.h): it closes its listener and
// connections, says so, and exits 0; the port no longer accepts connections.
TEST(CliDistTest, ASignalStopsNwServeCleanly) {
  Workspace ws("serve");
  ASSERT_TRUE(ws.MakeModel());
  for (const int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    const fs::path log = ws.log("serve-" + std::to_string(sig));
    Child serve(
        {NW_BIN, "serve", "--model", (ws.dir() / "model").string(), "--listen", "127.0.0.1:0"},
        log);
    ASSERT_TRUE(serve.started());
    const std::regex listening(R"(nw serve: listening on http://127\.0\.0\.1:(\d+))");
    int port = 0;
    ASSERT_TRUE(WaitUntil(
        [&] {
          std::smatch m;
          const std::string text = serve.Log();
          if (std::regex_search(text, m, listening)) port = std::stoi(m[1].str());
          return port != 0 || serve.Exited();
        },
        60'000))
        << serve.Log();
    ASSERT_NE(port, 0) << serve.Log();
    EXPECT_TRUE(Connects(port));
    serve.Signal(sig);
    ASSERT_TRUE(serve.WaitExit(20'000)) << serve.Log();
    EXPECT_EQ(serve.exit_code(), 0) << serve.Log();
    EXPECT_NE(serve.Log().find("nw serve: stopped"), std::string::npos) << serve.Log();
    EXPECT_FALSE(Connects(port));
  }
}

}  // namespace
}  // namespace nw
