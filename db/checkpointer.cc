#include "db/checkpointer.h"

#include <pthread.h>
#include <signal.h>

#include <utility>

namespace nw::db_internal {

Result<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(Db& writer, int pages) {
  if (pages < 1) return Status::InvalidArgument(writer.file() + ": checkpoint pages < 1");
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(writer.file().c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr conn(raw);
  if (rc != SQLITE_OK) {
    return Status::IoError(writer.file() + ": opening the checkpoint connection: " +
                           (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  // As the writer: fsync the WAL before and the file after a checkpoint, not more.
  sqlite3_exec(conn.get(), "PRAGMA synchronous = NORMAL", nullptr, nullptr, nullptr);
  auto c = std::make_unique<WalCheckpointer>(PassKey(), writer, std::move(conn), pages);
  sqlite3_wal_hook(writer.get(), &WalCheckpointer::OnCommit, c.get());
  return c;
}

WalCheckpointer::WalCheckpointer(PassKey, Db& writer, DbPtr conn, int pages)
    : writer_(writer), conn_(std::move(conn)), pages_(pages) {
  // The thread must never take a process-directed signal (SIGTERM's default action would end the
  // process before a SignalStopper started later could see it): it starts with every signal
  // blocked, inherited from this thread's mask, which is restored right after.
  struct BlockAllSignals {
    sigset_t old;
    BlockAllSignals() {
      sigset_t all;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);
    }
    ~BlockAllSignals() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } blocked;
  thread_ = std::thread([this] { Run(); });
}

WalCheckpointer::~WalCheckpointer() {
  // Back to SQLite's own auto-checkpoint (this also replaces our hook) before the thread ends.
  sqlite3_wal_autocheckpoint(writer_.get(), 1000);
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

int64_t WalCheckpointer::checkpoints() const {
  std::lock_guard<std::mutex> l(mu_);
  return checkpoints_;
}

int WalCheckpointer::OnCommit(void* self, sqlite3* db, const char* schema, int wal_pages) {
  auto* c = static_cast<WalCheckpointer*>(self);
  if (wal_pages >= 8 * c->pages_) {
    // The thread has not kept up: bound the WAL as SQLite's auto-checkpoint would.
    sqlite3_wal_checkpoint_v2(db, schema, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  } else if (wal_pages >= c->pages_) {
    {
      std::lock_guard<std::mutex> l(c->mu_);
      c->wake_ = true;
    }
    c->cv_.notify_one();
  }
  return SQLITE_OK;
}

void WalCheckpointer::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return wake_ || stop_; });
    if (stop_) return;
    wake_ = false;
    l.unlock();
    // Busy (another checkpoint running) or a failure: the next commit wakes us again.
    sqlite3_wal_checkpoint_v2(conn_.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    l.lock();
    ++checkpoints_;
  }
}

}  // namespace nw::db_internal
