#include "engine/checkpoint/json_util.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <system_error>
#include <vector>

namespace nw {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

Result<nlohmann::json> ParseJsonStrict(std::string_view text, const std::string& source) {
  // One set of keys per open object; a key event belongs to the innermost open object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event,
                      nlohmann::json& parsed) -> bool {
    switch (event) {
      case nlohmann::json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case nlohmann::json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case nlohmann::json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
        }
        break;
      default:
        break;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                              /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(source + ": invalid JSON: " + e.what());
  }
  if (!duplicate.empty()) {
    return Status::Corruption(source + ": duplicate key '" + duplicate + "'");
  }
  return j;
}

std::string JsonSnippet(const nlohmann::json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() > 64) return nlohmann::json(s.substr(0, 64)).dump() + "...";
    return v.dump();
  }
  if (!v.is_structured()) return v.dump();
  const bool flat =
      v.size() <= 8 && std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) {
        return e.is_primitive() && (!e.is_string() || e.get_ref<const std::string&>().size() <= 64);
      });
  if (flat) return v.dump();
  return v.is_array() ? "[...]" : "{...}";
}

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

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents) {
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    FilePtr f(std::fopen(tmp.c_str(), "wb"));
    if (!f) {
      return Status::IoError(tmp.string() + ": cannot create: " + std::strerror(errno));
    }
    if (!contents.empty() &&
        std::fwrite(contents.data(), 1, contents.size(), f.get()) != contents.size()) {
      return Status::IoError(tmp.string() + ": write failed: " + std::strerror(errno));
    }
    if (std::fflush(f.get()) != 0) {
      return Status::IoError(tmp.string() + ": flush failed: " + std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::IoError("cannot rename " + tmp.string() + " to " + path.string());
  }
  return Status::Ok();
}

}  // namespace nw
