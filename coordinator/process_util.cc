#include "coordinator/process_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

namespace nw {

SignalStopper::SignalStopper(std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::thread([this] {
    const timespec tick{0, 100'000'000};
    while (!done_.load()) {
      const int sig = sigtimedwait(&set_, nullptr, &tick);
      if (sig > 0) {
        signal_.store(sig);
        if (on_signal_) on_signal_(sig);
        return;
      }
    }
  });
}

SignalStopper::~SignalStopper() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
}

LockFile::LockFile(PassKey, int fd) : fd_(fd) {}

LockFile::~LockFile() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

Result<std::unique_ptr<LockFile>> LockFile::Acquire(const std::filesystem::path& path,
                                                    const std::string& holder_description) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IoError("cannot open lock file " + path.string() + ": " + std::strerror(errno));
  }
  auto lock = std::make_unique<LockFile>(PassKey(), fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      return Status::FailedPrecondition(holder_description + " (lock file " + path.string() +
                                        " is held by another process)");
    }
    return Status::IoError("cannot lock " + path.string() + ": " + std::strerror(err));
  }
  return lock;
}

}  // namespace nw
