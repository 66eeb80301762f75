#include "tests/support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <system_error>

#include "common/file_io.h"

namespace nw::test_support {

TempDir::TempDir(std::string_view tag) {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / ("nw-" + std::string(tag) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFileText(const std::filesystem::path& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    ADD_FAILURE() << text.status().ToString();
    return "";
  }
  return *std::move(text);
}

void WriteFileText(const std::filesystem::path& path, std::string_view data) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

}  // namespace nw::test_support
