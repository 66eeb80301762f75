// Whole-file reading: the one place a file's bytes are read into a string, with errors that name
// the file. Thread-safety: pure function.
#pragma once

#include <filesystem>
#include <string>

#include "common/status.h"

namespace nw {

/// Reads a whole file, bytes as they are: NotFound ("PATH: no such file") when it does not
/// exist, IoError naming the file when it cannot be opened or read.
Result<std::string> ReadFileToString(const std::filesystem::path& path);

}  // namespace nw
