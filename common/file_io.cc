#include "common/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace nw {

Result<std::string> ReadFileToString(const std::filesystem::path& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(path.string() + ": no such file");
    return Status::IoError(path.string() + ": cannot open: " + std::strerror(err));
  }
  std::string out;
  std::vector<char> buf(1 << 16);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) out.append(buf.data(), n);
  if (std::ferror(f.get())) return Status::IoError(path.string() + ": read error");
  return out;
}

}  // namespace nw
