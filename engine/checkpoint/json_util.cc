#include "engine/checkpoint/json_util.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <unordered_set>
#include <vector>

namespace nw {

namespace {

// A SAX pass that only looks for a repeated key in any object: one set of keys per open object,
// no DOM. (nlohmann's parser callback cannot be used for this: after every nested value it
// scans the whole enclosing object for discarded entries, so a header of n tensor entries took
// O(n^2), hours for a million.)
class DuplicateKeyFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!open_.empty() && !open_.back().insert(k).second) {
      duplicate_ = k;
      return false;  // stop: one is enough
    }
    return true;
  }
  bool end_object() override {
    if (!open_.empty()) open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
  const std::optional<std::string>& duplicate() const { return duplicate_; }

 private:
  std::vector<std::unordered_set<std::string>> open_;
  std::optional<std::string> duplicate_;
};

}  // namespace

Result<nlohmann::json> ParseJsonStrict(std::string_view text, const std::string& source) {
  // Both passes are linear in the text: the DOM (with nlohmann's own errors), then the keys.
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                              /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(source + ": invalid JSON: " + e.what());
  }
  DuplicateKeyFinder finder;
  try {
    (void)nlohmann::json::sax_parse(text.begin(), text.end(), &finder);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(source + ": invalid JSON: " + e.what());
  }
  if (finder.duplicate()) {
    return Status::Corruption(source + ": duplicate key '" + *finder.duplicate() + "'");
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
