#include "tests/support/shell.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace nw::test_support {

CommandResult Sh(const std::string& cmd) {
  CommandResult r;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace nw::test_support
