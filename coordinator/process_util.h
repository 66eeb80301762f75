// Process plumbing for the long-running commands (`nw coordinator`, `nw worker`): turning
// SIGINT/SIGTERM into a stop request without touching global state from a signal handler. (The
// lock that keeps a second writer off a database is coordinator/db_lock.h.)
//
// Thread-safety: SignalStopper owns one thread that alone waits for the signals; construct it on
// the main thread before other threads start (it blocks the signals in the calling thread, and
// threads started afterwards inherit the mask).
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace nw {

class SignalStopper {
 public:
  /// Which signals reach `on_signal`: only the first, or every one (e.g. `nw worker`: the first
  /// SIGTERM drains, a second one stops at once).
  enum class Deliver { kFirst, kEvery };
  /// Blocks SIGINT and SIGTERM in the calling thread and waits for them on a thread of its own;
  /// the first one (or each one, with Deliver::kEvery) calls `on_signal` (from that thread) with
  /// the signal number.
  explicit SignalStopper(std::function<void(int)> on_signal, Deliver deliver = Deliver::kFirst);
  ~SignalStopper();
  SignalStopper(const SignalStopper&) = delete;
  SignalStopper& operator=(const SignalStopper&) = delete;

  int signal() const { return signal_.load(); }  // 0 until a signal arrived; the latest one

 private:
  sigset_t set_;
  std::function<void(int)> on_signal_;
  std::atomic<int> signal_{0};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace nw
