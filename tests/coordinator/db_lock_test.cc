// DbWriterLock: one writing process per database (`nw coordinator` or `nw run`), the holder named
// in the refusal, the lock gone with its holder. (Across processes: tests/dist/cli_dist_test.cc,
// CliDistTest.RunAndCoordinatorRefuseEachOthersDatabase.)
#include "coordinator/db_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

namespace nw {
namespace {

class DbLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("nw-dblock-test-" + std::to_string(getpid()) +
                                                     "-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path db() const { return dir_ / "sweep.db"; }
  std::string LockFileText() const {
    std::ifstream in(DbWriterLock::LockPathFor(db()));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::filesystem::path dir_;
};

TEST_F(DbLockTest, TheHolderIsNamedInTheRefusalInBothDirections) {
  const std::string me = "(pid " + std::to_string(getpid()) + ")";
  {
    auto daemon = DbWriterLock::Acquire(db(), DbWriterRole::kCoordinator);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    EXPECT_EQ((*daemon)->path(), dir_ / "sweep.db.coordinator.lock");
    EXPECT_EQ(LockFileText(), "role=coordinator pid=" + std::to_string(getpid()) + "\n");
    // flock(2) excludes a second open file description even in the same process.
    auto run = DbWriterLock::Acquire(db(), DbWriterRole::kRun);
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.status().code(), StatusCode::kFailedPrecondition);
    const std::string msg = run.status().message();
    EXPECT_NE(msg.find(db().string() + " is in use by a running `nw coordinator` daemon " + me),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("sweep.db.coordinator.lock"), std::string::npos) << msg;
    auto second = DbWriterLock::Acquire(db(), DbWriterRole::kCoordinator);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("another coordinator serves " + db().string()),
              std::string::npos)
        << second.status().message();
    // The refused attempts did not disturb the holder's line.
    EXPECT_EQ(LockFileText(), "role=coordinator pid=" + std::to_string(getpid()) + "\n");
  }
  // Released with its holder: now a run takes it, and a daemon is refused.
  auto run = DbWriterLock::Acquire(db(), DbWriterRole::kRun);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto daemon = DbWriterLock::Acquire(db(), DbWriterRole::kCoordinator);
  ASSERT_FALSE(daemon.ok());
  EXPECT_NE(
      daemon.status().message().find(db().string() + " is in use by a running `nw run` " + me),
      std::string::npos)
      << daemon.status().message();
}

TEST_F(DbLockTest, AHolderKilledWithSigkillLeavesNoLockBehind) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto held = DbWriterLock::Acquire(db(), DbWriterRole::kCoordinator);
    const char ok = held.ok() ? '1' : '0';
    (void)!write(ready[1], &ok, 1);
    pause();  // until SIGKILL
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  ASSERT_EQ(ok, '1');
  auto refused = DbWriterLock::Acquire(db(), DbWriterRole::kRun);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("(pid " + std::to_string(child) + ")"),
            std::string::npos)
      << refused.status().message();
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  // The file is still there with the dead holder's line, but the kernel dropped the lock.
  EXPECT_TRUE(std::filesystem::exists(DbWriterLock::LockPathFor(db())));
  auto taken = DbWriterLock::Acquire(db(), DbWriterRole::kRun);
  EXPECT_TRUE(taken.ok()) << taken.status().ToString();
}

TEST_F(DbLockTest, AGateRerunHoldsTheLockLikeARun) {
  const std::string me = "(pid " + std::to_string(getpid()) + ")";
  auto gate = DbWriterLock::Acquire(db(), DbWriterRole::kGate);
  ASSERT_TRUE(gate.ok()) << gate.status().ToString();
  EXPECT_EQ(LockFileText(), "role=gate pid=" + std::to_string(getpid()) + "\n");
  for (DbWriterRole other : {DbWriterRole::kCoordinator, DbWriterRole::kRun}) {
    auto refused = DbWriterLock::Acquire(db(), other);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find(db().string() +
                                              " is in use by a running `nw gate --rerun` " + me),
              std::string::npos)
        << refused.status().message();
  }
}

TEST(DbWriterHolderTest, ParsesOnlyWellFormedLines) {
  auto h = ParseDbWriterHolder("role=run pid=42\n");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->role, DbWriterRole::kRun);
  EXPECT_EQ(h->pid, 42);
  EXPECT_EQ(ParseDbWriterHolder("role=coordinator pid=7")->role, DbWriterRole::kCoordinator);
  EXPECT_EQ(ParseDbWriterHolder("role=gate pid=9")->role, DbWriterRole::kGate);
  for (const char* bad :
       {"", "role=", "role=run", "role=x pid=1", "role=run pid=", "role=run pid=0",
        "role=run pid=-3", "role=run pid=12abc", "pid=1 role=run"}) {
    EXPECT_FALSE(ParseDbWriterHolder(bad).has_value()) << bad;
  }
}

TEST_F(DbLockTest, AnUnwritableLockFileIsAnIoError) {
  auto lock = DbWriterLock::Acquire(dir_ / "no-such-dir" / "x.db", DbWriterRole::kRun);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), StatusCode::kIoError);
  EXPECT_NE(lock.status().message().find("no-such-dir"), std::string::npos);
}

}  // namespace
}  // namespace nw
