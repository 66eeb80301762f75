// WalCheckpointer: copies a WAL database's committed pages back into the main file on a thread
// of its own, so that the writer's commits never do it. Internal to nw_db (Store::Open starts
// one for every read-write file store).
//
// SQLite's default is an auto-checkpoint inside the COMMIT that pushes the WAL past 1000 pages:
// that commit copies every page back and fsyncs both files (synchronous=NORMAL), on the
// coordinator's loop thread. Here the writer's auto-checkpoint is off; a wal hook on the writer
// (called after each commit with the WAL's size) wakes this thread once the WAL reaches
// `pages`, and it runs a PASSIVE checkpoint on a second connection, concurrently with the
// writer (WAL mode allows that; a passive checkpoint never blocks the writer or readers). If
// the WAL still grows to 8x `pages` (this thread starved, or a long reader), the writer
// checkpoints inline as SQLite would have, so the WAL stays bounded.
//
// Thread-safety: Start() and the destructor run on the writer's thread. The thread owns the
// second connection; the only state shared with the writer's thread is the wake-up flag (under
// the mutex). The destructor stops and joins the thread and removes the hook (restoring
// SQLite's auto-checkpoint) before the writer may close.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "db/sqlite.h"

namespace nw::db_internal {

class WalCheckpointer {
 public:
  /// `writer` must be in WAL mode on a file and outlive the checkpointer.
  static Result<std::unique_ptr<WalCheckpointer>> Start(Db& writer, int pages);
  ~WalCheckpointer();
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  /// Checkpoints run by the thread so far (tests).
  int64_t checkpoints() const;

 private:
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  WalCheckpointer(PassKey, Db& writer, DbPtr conn, int pages);

 private:
  static int OnCommit(void* self, sqlite3* db, const char* schema, int wal_pages);
  void Run();

  Db& writer_;
  DbPtr conn_;  // used only by thread_
  const int pages_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;        // under mu_
  bool stop_ = false;        // under mu_
  int64_t checkpoints_ = 0;  // under mu_
  std::thread thread_;       // last: started when everything above is ready
};

}  // namespace nw::db_internal
