// Helpers for the multi-process tests: `nw coordinator` and `nw worker` processes started from
// the nw binary (NW_BIN), killed with signals, and the database checked with SQL afterwards.
// Waiting is by polling with deadlines, never by sleeping for correctness.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/shell.h"

extern char** environ;

namespace nw::dist_test {

namespace fs = std::filesystem;

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Polls `pred` every `every_ms` until it holds or `timeout_ms` passes.
inline bool WaitUntil(const std::function<bool()>& pred, int64_t timeout_ms,
                      int64_t every_ms = 50) {
  const int64_t end = NowMs() + timeout_ms;
  while (true) {
    if (pred()) return true;
    if (NowMs() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(every_ms));
  }
}

using test_support::CommandResult;
using test_support::Sh;

/// A child process with stdout and stderr in a log file. Killed (SIGKILL) and reaped when
/// destroyed, so a failing test leaves nothing behind.
class Child {
 public:
  Child(std::vector<std::string> argv, const fs::path& log) : log_(log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  void Signal(int sig) const {
    if (pid_ > 0 && !exited_) kill(pid_, sig);
  }
  /// True if it has exited (reaping it); the exit status is then in status().
  bool Exited() {
    if (pid_ <= 0 || exited_) return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      exited_ = true;
      status_ = st;
    }
    return exited_;
  }
  /// Waits up to timeout_ms for it to exit.
  bool WaitExit(int64_t timeout_ms) {
    return WaitUntil([this] { return Exited(); }, timeout_ms, 20);
  }
  void KillNow() {
    Signal(SIGKILL);
    WaitExit(10'000);
  }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  fs::path log_;
};

/// Read-only SQL on the database file (a second connection; the coordinator is the writer).
class Db {
 public:
  explicit Db(const fs::path& file) {
    if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << file;
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  ~Db() { sqlite3_close_v2(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  /// Rows of text columns.
  std::vector<std::vector<std::string>> Rows(const std::string& sql) {
    std::vector<std::vector<std::string>> out;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
      return out;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const auto* t = sqlite3_column_text(st, i);
        row.push_back(t != nullptr ? reinterpret_cast<const char*>(t) : "");
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(st);
    return out;
  }
  int64_t Int(const std::string& sql) {
    auto rows = Rows(sql);
    return rows.empty() || rows[0].empty() ? -1 : std::stoll(rows[0][0]);
  }

 private:
  sqlite3* db_ = nullptr;
};

/// A scratch folder with a random-weight model, campaign files, the database and logs.
class Workspace {
 public:
  explicit Workspace(const std::string& name) {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("nw-dist-" + name + "-" + std::to_string(getpid()) + "-" +
                                        std::to_string(rd() % 100000));
    fs::create_directories(dir_);
  }
  ~Workspace() {
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  const fs::path& dir() const { return dir_; }
  fs::path db() const { return dir_ / "nw.db"; }
  fs::path log(const std::string& name) const { return dir_ / (name + ".log"); }

  /// `nw model init` (tiny-a, random weights): campaigns need a model to resolve against.
  bool MakeModel() {
    CommandResult r = Sh(std::string(NW_BIN) + " model init --config " + NW_SOURCE_DIR +
                         "/models/configs/tiny-a.json --seed 7 " + (dir_ / "model").string());
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r.exit_code == 0;
  }
  /// A campaign of lengths x positions x trials jobs (all CPU backend).
  fs::path Campaign(const std::string& name, int lengths, int positions, int trials) {
    std::ostringstream y;
    y << "name: " << name << "\nmodel: model\ntask: niah-single\nhaystack: noise\nmatrix:\n"
      << "  context_length: [";
    for (int i = 0; i < lengths; ++i) y << (i ? ", " : "") << 200 + 8 * i;
    y << "]\n  needle_position: [";
    for (int i = 0; i < positions; ++i) y << (i ? ", " : "") << static_cast<double>(i) / positions;
    y << "]\n  topk: 16\n  precision: fp32\n  backend: cpu\ntrials: " << trials
      << "\nmax_jobs: 100000\n";
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << y.str();
    return p;
  }

  std::string Nw(const std::string& args) const {
    return std::string(NW_BIN) + " --db " + db().string() + " " + args;
  }

  /// Starts `nw coordinator` on tcp://127.0.0.1 (a free port, or `endpoint`), waits until it
  /// has bound, and returns it; the endpoint is in endpoint().
  std::unique_ptr<Child> StartCoordinator(const std::vector<std::string>& extra,
                                          const std::string& endpoint = "tcp://127.0.0.1:*") {
    const fs::path ep_file = dir_ / "endpoint";
    std::error_code ec;
    fs::remove(ep_file, ec);
    std::vector<std::string> argv = {NW_BIN,     "--db",   db().string(),     "coordinator",
                                     "--listen", endpoint, "--endpoint-file", ep_file.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, log("coordinator"));
    const bool bound = WaitUntil(
        [&] {
          std::ifstream in(ep_file);
          std::string line;
          if (in && std::getline(in, line) && !line.empty()) {
            endpoint_ = line;
            return true;
          }
          return c->Exited();
        },
        30'000);
    EXPECT_TRUE(bound && !c->Exited()) << c->Log();
    return c;
  }
  const std::string& endpoint() const { return endpoint_; }

  std::unique_ptr<Child> StartWorker(const std::string& id, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {NW_BIN, "worker", "--coordinator", endpoint_, "--id", id};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(argv, log("worker-" + id));
  }

 private:
  fs::path dir_;
  std::string endpoint_;
};

/// The checks every fault test ends with: each job of the campaign is done exactly once, with
/// exactly one result row and exactly one 'ok' attempt, and that attempt is the result's.
inline void ExpectEveryJobExactlyOnce(Db& db, const std::string& campaign, int64_t jobs) {
  const std::string of_campaign =
      "(SELECT job_key FROM campaign_jobs WHERE campaign_id = (SELECT id FROM campaigns WHERE "
      "name = '" +
      campaign + "'))";
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM " + of_campaign), jobs);
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM jobs WHERE state = 'done' AND key IN " + of_campaign),
            jobs);
  EXPECT_EQ(db.Int("SELECT COUNT(DISTINCT job_key) FROM results WHERE job_key IN " + of_campaign),
            jobs);
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM results WHERE job_key IN " + of_campaign), jobs)
      << "some job has more than one result";
  EXPECT_EQ(
      db.Int("SELECT COUNT(*) FROM attempts WHERE status = 'ok' AND job_key IN " + of_campaign),
      jobs)
      << "some job has more than one successful attempt";
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM results r JOIN attempts a ON a.job_key = r.job_key AND "
                   "a.attempt = r.attempt WHERE a.status = 'ok' AND r.job_key IN " +
                   of_campaign),
            jobs)
      << "a result row does not belong to its job's successful attempt";
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM attempts WHERE status = 'running' AND job_key IN " +
                   of_campaign),
            0);
}

}  // namespace nw::dist_test
