// Test support: a temporary folder removed with its contents at the end of its scope, and whole-
// file helpers for tests. One copy for every test area (tests/support, library nw_test_support).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace nw::test_support {

/// A fresh folder under the system temp dir (mkdtemp: nw-TAG-XXXXXX), removed on destruction.
/// A failure to create it is a test failure.
class TempDir {
 public:
  explicit TempDir(std::string_view tag = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// path() / name.
  std::filesystem::path File(const std::string& name) const { return path_ / name; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// The whole file's bytes; "" (and a test failure) when it cannot be read.
std::string ReadFileText(const std::filesystem::path& path);
/// Writes `data` as the whole file, creating its parent folders (a test failure if it cannot).
void WriteFileText(const std::filesystem::path& path, std::string_view data);

}  // namespace nw::test_support
