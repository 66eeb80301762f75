// The layers stay where they belong:
//  * the bottom layers are free of the infrastructure libraries: no source under kernels/ or
//    engine/ includes a YAML (yaml-cpp), ZeroMQ (zmq.h, cppzmq), SQLite or Boost header, nor a
//    header of a layer above them (coordinator/, worker/, db/, protocol/, task/, http/, report/,
//    cli/);
//  * the coordinator neither includes nor links worker/ or the engine (the compose/ roots put
//    them in one process): of engine/ it may use only the data the campaign expansion needs
//    (precision profiles, the backend catalog and faults, checkpoint configs and digests, the
//    tokenizer, the engine version); the NIAH task's names come from task/;
//  * the scheduler compiles without ZeroMQ: no header it reaches, transitively, is a ZeroMQ
//    header, and its library links only the wire types (nw_wire), not the codec (nw_protocol).
// Link closures come from CMake (tests/CMakeLists.txt, nw_link_closure). The scanners are
// checked on temporary trees first, so the tests cannot pass by scanning nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
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
      R"(coordinator/|worker/|db/|protocol/|task/|http/|report/|cli/|diff/|slurm/))");
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

bool IsSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".hpp" || ext == ".cc" || ext == ".cpp" || ext == ".cu" ||
         ext == ".cuh";
}

// Every #include of one file: (line, header as written).
std::vector<std::pair<int, std::string>> IncludesOf(const fs::path& file) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*[<"]([^>"]+)[>"])");
  std::vector<std::pair<int, std::string>> out;
  std::ifstream in(file);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::smatch m;
    if (std::regex_search(line, m, kInclude)) out.emplace_back(n, m[1].str());
  }
  return out;
}

// Includes under `root` (relative to `source_dir` in findings) whose header matches `forbidden`
// and not `allowed`.
std::vector<Finding> IncludesMatching(const fs::path& source_dir, const fs::path& root,
                                      const std::regex& forbidden, const std::regex& allowed,
                                      int* files_read) {
  std::vector<Finding> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || !IsSource(entry.path())) continue;
    ++*files_read;
    for (const auto& [line, header] : IncludesOf(entry.path())) {
      if (std::regex_search(header, forbidden) && !std::regex_search(header, allowed)) {
        out.push_back({fs::relative(entry.path(), source_dir).string(), line, header});
      }
    }
  }
  return out;
}

// Every header reachable from `starts` through includes that name a file under `source_dir`
// ("a/b.h" resolved against it), as written; `visited` gets the files of the tree it read.
std::set<std::string> ReachableHeaders(const fs::path& source_dir,
                                       const std::vector<std::string>& starts,
                                       std::set<std::string>* visited) {
  std::set<std::string> headers;
  std::vector<std::string> todo = starts;
  while (!todo.empty()) {
    const std::string f = todo.back();
    todo.pop_back();
    if (!visited->insert(f).second) continue;
    for (const auto& inc : IncludesOf(source_dir / f)) {
      const std::string& header = inc.second;
      headers.insert(header);
      if (fs::is_regular_file(source_dir / header)) todo.push_back(header);
    }
  }
  return headers;
}

std::set<std::string> SplitLinks(const std::string& csv) {
  std::set<std::string> out;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

const std::regex kZmqHeader(R"(^(zmq\.h|zmq\.hpp|zmq_addon\.hpp|zmq_utils\.h)$)");

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
                                        "#include \"coordinator/server.h\"",
                                        "#include \"task/niah.h\""};
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

TEST(LayeringTest, TheIncludeWalkFollowsTheTreeToAZeroMqHeader) {
  test_support::TempDir tmp("layering-walk");
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "a");
  std::ofstream(dir / "a" / "top.h") << "#include \"a/mid.h\"\n#include <vector>\n";
  std::ofstream(dir / "a" / "mid.h") << "#pragma once\n#include <string>\n";
  std::set<std::string> visited;
  std::set<std::string> headers = ReachableHeaders(dir, {"a/top.h"}, &visited);
  EXPECT_EQ(visited, (std::set<std::string>{"a/top.h", "a/mid.h"}));
  EXPECT_EQ(headers, (std::set<std::string>{"a/mid.h", "vector", "string"}));
  std::ofstream(dir / "a" / "mid.h") << "#pragma once\n#  include <zmq_addon.hpp>\n";
  visited.clear();
  headers = ReachableHeaders(dir, {"a/top.h"}, &visited);
  EXPECT_TRUE(headers.count("zmq_addon.hpp"));
  EXPECT_TRUE(std::regex_search(std::string("zmq_addon.hpp"), kZmqHeader));
  EXPECT_FALSE(std::regex_search(std::string("protocol/zmq_codec_notes.h"), kZmqHeader));
}

// Engine headers the coordinator may include: data, not the engine (see the top).
const std::regex kCoordinatorMayUse(
    R"(^engine/(precision\.h|backend_catalog\.h|fault\.h|version\.h|checkpoint/|text/))");

TEST(LayeringTest, CoordinatorIncludesNeitherWorkerNorTheEngine) {
  const fs::path src(NW_SOURCE_DIR);
  int files = 0;
  const std::vector<Finding> found =
      IncludesMatching(src, src / "coordinator", std::regex(R"(^(worker|compose|http|engine)/)"),
                       kCoordinatorMayUse, &files);
  EXPECT_GT(files, 20);
  EXPECT_TRUE(found.empty())
      << "coordinator/ must not include worker/, compose/, http/ or engine headers beyond its "
         "data (compose/ assembles workers and the coordinator):\n"
      << Describe(found);
}

TEST(LayeringTest, CoordinatorLinksNeitherWorkerNorTheEngine) {
  const std::set<std::string> links = SplitLinks(NW_COORDINATOR_LINKS);
  // The closure was really computed: what the coordinator does link is there.
  for (const char* lib : {"nw_campaign", "nw_scheduler", "nw_wire", "nw_protocol", "nw_db"}) {
    EXPECT_TRUE(links.count(lib)) << lib << " missing from " << NW_COORDINATOR_LINKS;
  }
  for (const char* lib :
       {"nw_worker", "nw_compose", "nw_http", "nw_engine", "nw_engine_seam", "nw_cpu_backend",
        "nw_parallel", "nw_cuda_backend", "nw_kernels_cuda", "nw_diff", "nw_dashboard"}) {
    EXPECT_FALSE(links.count(lib))
        << "nw_coordinator links " << lib << ": " << NW_COORDINATOR_LINKS;
  }
}

TEST(LayeringTest, TheSchedulerCompilesWithoutZeroMq) {
  const fs::path src(NW_SOURCE_DIR);
  std::set<std::string> visited;
  const std::set<std::string> headers =
      ReachableHeaders(src, {"coordinator/scheduler.h", "coordinator/scheduler.cc"}, &visited);
  // The walk went through the wire types.
  EXPECT_TRUE(visited.count("protocol/wire.h"));
  EXPECT_TRUE(visited.count("protocol/job.h"));
  for (const std::string& h : headers) {
    EXPECT_FALSE(std::regex_search(h, kZmqHeader)) << "the scheduler reaches <" << h << ">";
  }
  EXPECT_FALSE(visited.count("protocol/messages.h")) << "the scheduler reaches the zmq codec";
  const std::set<std::string> links = SplitLinks(NW_SCHEDULER_LINKS);
  EXPECT_TRUE(links.count("nw_wire")) << NW_SCHEDULER_LINKS;
  for (const char* lib : {"nw_protocol", "cppzmq", "PkgConfig::ZMQ", "nw_db"}) {
    EXPECT_FALSE(links.count(lib)) << "nw_scheduler links " << lib << ": " << NW_SCHEDULER_LINKS;
  }
}

}  // namespace
}  // namespace nw
