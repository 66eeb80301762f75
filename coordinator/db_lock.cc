#include "coordinator/db_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

namespace nw {
namespace {

// The holder's line, read back by a refused process (best effort: may be empty or partial while
// the holder is between flock() and write()).
std::string ReadHolderLine(int fd) {
  std::array<char, 128> buf{};
  const ssize_t n = ::pread(fd, buf.data(), buf.size() - 1, 0);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string();
}

std::string Describe(const std::optional<DbWriterHolder>& h) {
  if (!h) return "another nw process (an `nw coordinator` daemon, `nw run` or `nw gate --rerun`)";
  const std::string pid = " (pid " + std::to_string(h->pid) + ")";
  switch (h->role) {
    case DbWriterRole::kCoordinator:
      return "a running `nw coordinator` daemon" + pid;
    case DbWriterRole::kRun:
      return "a running `nw run`" + pid;
    case DbWriterRole::kGate:
      return "a running `nw gate --rerun`" + pid;
  }
  return "another nw process" + pid;
}

}  // namespace

std::string_view DbWriterRoleName(DbWriterRole r) {
  switch (r) {
    case DbWriterRole::kCoordinator:
      return "coordinator";
    case DbWriterRole::kRun:
      return "run";
    case DbWriterRole::kGate:
      return "gate";
  }
  return "run";
}

std::optional<DbWriterHolder> ParseDbWriterHolder(std::string_view text) {
  DbWriterHolder h;
  constexpr std::string_view kRole = "role=";
  constexpr std::string_view kPid = " pid=";
  if (text.substr(0, kRole.size()) != kRole) return std::nullopt;
  text.remove_prefix(kRole.size());
  const size_t sp = text.find(kPid);
  if (sp == std::string_view::npos) return std::nullopt;
  const std::string_view role = text.substr(0, sp);
  if (role == "coordinator") {
    h.role = DbWriterRole::kCoordinator;
  } else if (role == "run") {
    h.role = DbWriterRole::kRun;
  } else if (role == "gate") {
    h.role = DbWriterRole::kGate;
  } else {
    return std::nullopt;
  }
  text.remove_prefix(sp + kPid.size());
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, h.pid);
  if (ec != std::errc() || h.pid <= 0 || (p != end && *p != '\n')) return std::nullopt;
  return h;
}

std::filesystem::path DbWriterLock::LockPathFor(const std::filesystem::path& db) {
  return std::filesystem::path(db.string() + ".coordinator.lock");
}

DbWriterLock::DbWriterLock(PassKey, int fd, std::filesystem::path path)
    : fd_(fd), path_(std::move(path)) {}

DbWriterLock::~DbWriterLock() {
  if (fd_ < 0) return;
  // Clear the holder line while still holding the lock, then release it by closing.
  (void)::ftruncate(fd_, 0);
  ::close(fd_);
}

Result<std::unique_ptr<DbWriterLock>> DbWriterLock::Acquire(const std::filesystem::path& db,
                                                            DbWriterRole role) {
  const std::filesystem::path path = LockPathFor(db);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IoError(db.string() + ": cannot open the writer lock file " + path.string() +
                           ": " + std::strerror(errno));
  }
  // Owns fd from here on (closing it releases any lock).
  auto lock = std::make_unique<DbWriterLock>(PassKey(), fd, path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      lock->fd_ = -1;
      ::close(fd);
      return Status::IoError(db.string() + ": cannot lock " + path.string() + ": " +
                             std::strerror(err));
    }
    const std::optional<DbWriterHolder> holder = ParseDbWriterHolder(ReadHolderLine(fd));
    lock->fd_ = -1;  // not ours: do not truncate the holder's line
    ::close(fd);
    std::string msg;
    if (role == DbWriterRole::kCoordinator && holder &&
        holder->role == DbWriterRole::kCoordinator) {
      msg = "another coordinator serves " + db.string() + ": " + Describe(holder);
    } else {
      msg = db.string() + " is in use by " + Describe(holder);
    }
    return Status::FailedPrecondition(msg + " (it holds the lock file " + path.string() + ")");
  }
  const std::string line =
      "role=" + std::string(DbWriterRoleName(role)) + " pid=" + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    return Status::IoError(db.string() + ": cannot write " + path.string() + ": " +
                           std::strerror(errno));
  }
  return lock;
}

}  // namespace nw
