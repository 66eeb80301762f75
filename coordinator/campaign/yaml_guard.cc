#include "coordinator/campaign/yaml_guard.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace nw {
namespace {

// a + b, or cap when the sum would pass it (a, b >= 0).
int64_t SaturatingAdd(int64_t a, int64_t b, int64_t cap) { return a > cap - b ? cap : a + b; }

// Counts events, aliases, depth and the alias-expanded node count of one or more documents.
// Records the first limit that is exceeded and ignores the rest of the stream after it.
class GuardHandler : public YAML::EventHandler {
 public:
  explicit GuardHandler(const YamlGuardLimits& limits) : limits_(limits) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++stats_.documents;
    anchor_weight_.clear();
    if (stats_.documents > 1) Violate(mark, "a campaign file holds one YAML document, found more");
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Leaf(mark, anchor); }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                const std::string& /*value*/) override {
    Leaf(mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (!Event(mark)) return;
    ++stats_.aliases;
    if (stats_.aliases > limits_.max_aliases) {
      Violate(mark, "too many aliases (more than " + std::to_string(limits_.max_aliases) + ")");
      return;
    }
    auto it = anchor_weight_.find(anchor);
    if (it == anchor_weight_.end()) {
      Violate(mark, "alias to an unknown anchor");
      return;
    }
    if (it->second < 0) {
      Violate(mark, "alias refers to a node that contains it (recursive alias)");
      return;
    }
    AddToParent(mark, it->second);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value /*style*/) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value /*style*/) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { Close(); }

  const YamlGuardStats& stats() const { return stats_; }
  bool violated() const { return violated_; }
  const YAML::Mark& violation_mark() const { return violation_mark_; }
  const std::string& violation() const { return violation_; }

 private:
  struct Frame {
    YAML::Mark mark;
    YAML::anchor_t anchor = 0;
    int64_t weight = 1;  // this collection plus everything under it, aliases expanded
  };

  // Counts one event; false once a limit has been exceeded (the rest is ignored).
  bool Event(const YAML::Mark& mark) {
    if (violated_) return false;
    ++stats_.events;
    if (stats_.events > limits_.max_events) {
      Violate(mark, "too many YAML events (more than " + std::to_string(limits_.max_events) + ")");
      return false;
    }
    return true;
  }

  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (!Event(mark)) return;
    if (anchor != YAML::NullAnchor) anchor_weight_[anchor] = 1;
    AddToParent(mark, 1);
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (!Event(mark)) return;
    // -1 marks an open anchor: an alias to it from inside would make the document recursive.
    if (anchor != YAML::NullAnchor) anchor_weight_[anchor] = -1;
    stack_.push_back(Frame{mark, anchor, 1});
    stats_.max_depth = std::max(stats_.max_depth, static_cast<int>(stack_.size()));
    if (static_cast<int>(stack_.size()) > limits_.max_depth) {
      Violate(mark, "nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
  }

  void Close() {
    if (violated_ || stack_.empty()) return;
    Frame f = stack_.back();
    stack_.pop_back();
    if (f.anchor != YAML::NullAnchor) anchor_weight_[f.anchor] = f.weight;
    AddToParent(f.mark, f.weight);
  }

  void AddToParent(const YAML::Mark& mark, int64_t weight) {
    const int64_t cap = limits_.max_nodes < INT64_MAX ? limits_.max_nodes + 1 : INT64_MAX;
    int64_t& target = stack_.empty() ? stats_.expanded_nodes : stack_.back().weight;
    target = SaturatingAdd(target, std::min(cap, weight), cap);
    // The total is the document's weight plus what is still open above this node.
    int64_t total = stats_.expanded_nodes;
    for (const Frame& f : stack_) total = SaturatingAdd(total, f.weight, cap);
    if (total > limits_.max_nodes) {
      Violate(mark, "the document expands to more than " + std::to_string(limits_.max_nodes) +
                        " nodes once aliases are expanded (alias bomb?)");
    }
  }

  void Violate(const YAML::Mark& mark, std::string message) {
    if (violated_) return;
    violated_ = true;
    violation_mark_ = mark;
    violation_ = std::move(message);
  }

  const YamlGuardLimits& limits_;
  YamlGuardStats stats_;
  std::vector<Frame> stack_;
  std::unordered_map<YAML::anchor_t, int64_t> anchor_weight_;
  bool violated_ = false;
  YAML::Mark violation_mark_;
  std::string violation_;
};

}  // namespace

std::string FormatLocated(const std::string& source, int line, int column, std::string_view msg) {
  std::string out = source;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  out += ": ";
  out += msg;
  return out;
}

Result<YamlGuardStats> GuardYaml(std::string_view text, const std::string& source,
                                 const YamlGuardLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Status::InvalidArgument(FormatLocated(source, 0, 0,
                                                 "file is " + std::to_string(text.size()) +
                                                     " bytes, more than the limit of " +
                                                     std::to_string(limits.max_bytes)));
  }
  GuardHandler handler(limits);
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(handler)) {
      if (handler.violated()) break;
    }
  } catch (const YAML::Exception& e) {
    if (!handler.violated()) {
      return Status::InvalidArgument(
          FormatLocated(source, e.mark.line + 1, e.mark.column + 1, "malformed YAML: " + e.msg));
    }
  }
  if (handler.violated()) {
    const YAML::Mark& m = handler.violation_mark();
    return Status::InvalidArgument(
        FormatLocated(source, m.line + 1, m.column + 1, handler.violation()));
  }
  return handler.stats();
}

}  // namespace nw
