// DbWriterLock: one writing process per database file. `nw coordinator` (the daemon) and `nw run`
// both write the Store; a database served by a daemon must not be written by an `nw run` at the
// same time (the daemon is the single writer: it keeps leases and the schedule in memory), nor
// the other way round. Both take this lock before they open the database, and refuse to start
// when another process holds it.
//
// `nw gate --rerun` runs jobs through the embedded coordinator too and takes the same lock.
//
// The lock is an exclusive flock(2) on FILE.coordinator.lock next to the database (the name the
// daemon has always used, so older daemons and this code exclude each other). The kernel drops
// it when the holder exits, kill -9 included, so a lock file left behind never blocks anyone:
// liveness needs no pid check. The holder writes one line into the file, "role=coordinator
// pid=1234", which a refused process reads back to say who holds the database. The file must
// be on a local file system (as the database: WAL mode needs one anyway).
//
// Thread-safety: the object is owned by one thread; it holds the lock until it is destroyed.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nw {

enum class DbWriterRole { kCoordinator, kRun, kGate };  // kGate: `nw gate --rerun`
std::string_view DbWriterRoleName(DbWriterRole r);      // "coordinator", "run", "gate"

/// Who holds a database's writer lock, as written in the lock file.
struct DbWriterHolder {
  DbWriterRole role = DbWriterRole::kCoordinator;
  pid_t pid = 0;
};

/// Parses a lock file's line ("role=run pid=42"); nullopt if it is not one.
std::optional<DbWriterHolder> ParseDbWriterHolder(std::string_view text);

class DbWriterLock {
 public:
  /// FILE.coordinator.lock for database FILE.
  static std::filesystem::path LockPathFor(const std::filesystem::path& db);
  /// Takes the lock for `db` as `role`. FailedPrecondition when another process holds it, with a
  /// message naming the database, the holder (`nw coordinator` daemon or `nw run`, and its pid
  /// when the holder wrote it) and the lock file; IoError when the lock file cannot be opened.
  static Result<std::unique_ptr<DbWriterLock>> Acquire(const std::filesystem::path& db,
                                                       DbWriterRole role);
  ~DbWriterLock();
  DbWriterLock(const DbWriterLock&) = delete;
  DbWriterLock& operator=(const DbWriterLock&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  /// Use Acquire().
  DbWriterLock(PassKey, int fd, std::filesystem::path path);

 private:
  int fd_;
  std::filesystem::path path_;
};

}  // namespace nw
