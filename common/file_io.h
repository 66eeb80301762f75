// Whole-file reading: the one place a file's bytes are read into a string, with errors that name
// the file. Thread-safety: pure function.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "common/status.h"

namespace nw {

/// Owns a std::FILE* (fclose on destruction).
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

/// Reads a whole file, bytes as they are: NotFound ("PATH: no such file") when it does not
/// exist, IoError naming the file when it cannot be opened or read.
Result<std::string> ReadFileToString(const std::filesystem::path& path);

}  // namespace nw
