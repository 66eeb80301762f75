// Process plumbing for the long-running commands (`nw coordinator`, `nw worker`): turning
// SIGINT/SIGTERM into a stop request without touching global state from a signal handler, and an
// exclusive lock that keeps a second coordinator off a database.
//
// Thread-safety: SignalStopper owns one thread that alone waits for the signals; construct it on
// the main thread before other threads start (it blocks the signals in the calling thread, and
// threads started afterwards inherit the mask). LockFile is owned by one thread.
#pragma once

#include <signal.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace nw {

class SignalStopper {
 public:
  /// Blocks SIGINT and SIGTERM in the calling thread and waits for them on a thread of its own;
  /// the first one calls `on_signal` (from that thread) with the signal number.
  explicit SignalStopper(std::function<void(int)> on_signal);
  ~SignalStopper();
  SignalStopper(const SignalStopper&) = delete;
  SignalStopper& operator=(const SignalStopper&) = delete;

  int signal() const { return signal_.load(); }  // 0 until a signal arrived

 private:
  sigset_t set_;
  std::function<void(int)> on_signal_;
  std::atomic<int> signal_{0};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// An exclusive advisory lock (flock) on a file, created if needed, held while the object lives.
class LockFile {
 public:
  /// FailedPrecondition naming the file when another process holds it.
  static Result<std::unique_ptr<LockFile>> Acquire(const std::filesystem::path& path,
                                                   const std::string& holder_description);
  ~LockFile();
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

 private:
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  LockFile(PassKey, int fd);

 private:
  int fd_;
};

}  // namespace nw
