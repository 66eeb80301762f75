// Helpers shared by the checkpoint tests: a self-deleting temporary folder and file I/O.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "engine/checkpoint/config.h"
#include "tests/support/temp_dir.h"

namespace nw::testing_util {

/// A fresh folder under the system temp dir, removed with its contents on destruction.
using TempDir = test_support::TempDir;

inline std::string ReadAll(const std::filesystem::path& p) { return test_support::ReadFileText(p); }

inline void WriteAll(const std::filesystem::path& p, const std::string& data) {
  test_support::WriteFileText(p, data);
}

inline std::filesystem::path ConfigPath(const std::string& name) {
  return std::filesystem::path(NW_SOURCE_DIR) / "models" / "configs" / name;
}

inline std::filesystem::path DataPath(const std::string& name) {
  return std::filesystem::path(NW_TEST_DATA_DIR) / name;
}

}  // namespace nw::testing_util
