// The bottom layers stay free of the infrastructure libraries: no source under kernels/ or
// engine/ includes a YAML (yaml-cpp), ZeroMQ (zmq.h, cppzmq), SQLite or Boost header, nor a header
// of a layer above them (coordinator/, worker/, db/, protocol/, http/, report/, cli/, ...). The
// scanner is checked on a temporary tree first, so the test cannot pass by scanning nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace nw {
namespace {

namespace fs = std::filesystem;

struct Finding {
  std::string file;
  int line = 0;
  std::string text;
};

// Every #include line of a C++/CUDA source under `root` that names a forbidden header, and the
// number of files read.
std::vector<Finding> ForbiddenIncludes(const fs::path& root, int* files_read) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*[<"]([^>"]+)[>"])");
  static const std::regex kForbidden(
      R"(^(yaml-cpp/|yaml\.h$|zmq\.h$|zmq\.hpp$|zmq_addon\.hpp$|zmq_utils\.h$|sqlite3\.h$|sqlite3ext\.h$|boost/|)"
      R"(coordinator/|worker/|db/|protocol/|http/|report/|cli/|diff/|slurm/))");
  std::vector<Finding> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".hpp" && ext != ".cc" && ext != ".cpp" && ext != ".cu" &&
        ext != ".cuh") {
      continue;
    }
    ++*files_read;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      std::smatch m;
      if (std::regex_search(line, m, kInclude) && std::regex_search(m[1].str(), kForbidden)) {
        out.push_back({entry.path().string(), n, line});
      }
    }
  }
  return out;
}

std::string Describe(const std::vector<Finding>& found) {
  std::ostringstream s;
  for (const Finding& f : found) s << f.file << ":" << f.line << ": " << f.text << "\n";
  return s.str();
}

TEST(LayeringTest, TheScannerFindsAForbiddenInclude) {
  test_support::TempDir tmp("layering");
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "cpu");
  std::ofstream(dir / "cpu" / "clean.h") << "#pragma once\n#include <vector>\n#include "
                                            "\"engine/types.h\"\n#include <nlohmann/json.hpp>\n";
  int files = 0;
  EXPECT_TRUE(ForbiddenIncludes(dir, &files).empty());
  EXPECT_EQ(files, 1);
  const std::vector<std::string> bad = {"#include <yaml-cpp/yaml.h>",
                                        "#include <zmq.hpp>",
                                        "  #  include <zmq.h>",
                                        "#include <sqlite3.h>",
                                        "#include <boost/asio.hpp>",
                                        "#include \"db/store.h\"",
                                        "#include \"coordinator/server.h\""};
  for (size_t i = 0; i < bad.size(); ++i) {
    const fs::path f = dir / "cpu" / ("bad" + std::to_string(i) + (i % 2 ? ".cu" : ".cc"));
    std::ofstream(f) << "// a source\n" << bad[i] << "\n";
    files = 0;
    const std::vector<Finding> found = ForbiddenIncludes(dir, &files);
    ASSERT_EQ(found.size(), 1u) << bad[i] << "\n" << Describe(found);
    EXPECT_EQ(found[0].file, f.string());
    EXPECT_EQ(found[0].line, 2);
    fs::remove(f);
  }
}

TEST(LayeringTest, KernelsAndEngineIncludeNoInfrastructureHeaders) {
  for (const char* layer : {"kernels", "engine"}) {
    const fs::path root = fs::path(NW_SOURCE_DIR) / layer;
    int files = 0;
    const std::vector<Finding> found = ForbiddenIncludes(root, &files);
    EXPECT_GT(files, 20) << root;  // the layer was really read
    EXPECT_TRUE(found.empty()) << layer
                               << "/ must not include YAML, ZeroMQ, SQLite, Boost or upper-layer "
                                  "headers:\n"
                               << Describe(found);
  }
}

}  // namespace
}  // namespace nw
