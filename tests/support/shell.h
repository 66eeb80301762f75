// Test support: runs a shell command and collects what it printed (the CLI end-to-end tests).
#pragma once

#include <string>

namespace nw::test_support {

struct CommandResult {
  int exit_code = -1;  // -1: not started, or ended by a signal
  std::string out;     // stdout and stderr together
};

/// Runs `cmd` through /bin/sh (popen) with stderr joined to stdout, and waits for it.
CommandResult Sh(const std::string& cmd);

}  // namespace nw::test_support
