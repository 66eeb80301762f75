// SIGINT/SIGTERM as a stop request for the long-running commands (`nw run`, `nw coordinator`,
// `nw worker`, `nw serve`), without touching global state from a signal handler: the signals are
// blocked and one thread of the stopper's own takes them with sigtimedwait.
//
// Thread-safety: construct it on the main thread before other threads start (it blocks the
// signals in the calling thread, and threads started afterwards inherit the mask). `on_signal`
// runs on the stopper's thread; signal() and Wait() may be called from any thread.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace nw {

class SignalStopper {
 public:
  /// Which signals reach `on_signal`: only the first, or every one (e.g. `nw worker`: the first
  /// SIGTERM drains, a second one stops at once).
  enum class Deliver { kFirst, kEvery };
  /// Blocks SIGINT and SIGTERM in the calling thread and waits for them on a thread of its own;
  /// the first one (or each one, with Deliver::kEvery) calls `on_signal` (from that thread, when
  /// given) with the signal number.
  explicit SignalStopper(std::function<void(int)> on_signal = {},
                         Deliver deliver = Deliver::kFirst);
  /// Stops waiting for signals (they stay blocked in the threads that blocked them).
  ~SignalStopper();
  SignalStopper(const SignalStopper&) = delete;
  SignalStopper& operator=(const SignalStopper&) = delete;

  int signal() const { return signal_.load(); }  // 0 until a signal arrived; the latest one
  /// Blocks until a signal has arrived (returns at once if one already has) and returns it.
  int Wait() const;

 private:
  sigset_t set_;
  std::function<void(int)> on_signal_;
  std::atomic<int> signal_{0};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace nw
