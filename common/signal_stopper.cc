#include "common/signal_stopper.h"

#include <pthread.h>

#include <ctime>
#include <utility>

namespace nw {

SignalStopper::SignalStopper(std::function<void(int)> on_signal, Deliver deliver)
    : on_signal_(std::move(on_signal)) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::thread([this, deliver] {
    const timespec tick{0, 100'000'000};
    while (!done_.load()) {
      const int sig = sigtimedwait(&set_, nullptr, &tick);
      if (sig > 0) {
        signal_.store(sig);  // before on_signal_: it may end what then reads signal()
        signal_.notify_all();
        if (on_signal_) on_signal_(sig);
        if (deliver == Deliver::kFirst) return;
      }
    }
  });
}

SignalStopper::~SignalStopper() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
}

int SignalStopper::Wait() const {
  signal_.wait(0);
  return signal_.load();
}

}  // namespace nw
