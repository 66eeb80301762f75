// Guards run over YAML text before any node is built: document size, parser events, alias count,
// nesting depth and the node count with every alias expanded ("billion laughs" documents expand a
// few hundred bytes into billions of nodes once something walks them).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nw {

struct YamlGuardLimits {
  size_t max_bytes = 1 << 20;
  int64_t max_events = 100'000;
  int64_t max_nodes = 100'000;
  int max_aliases = 256;
  int max_depth = 32;
};

struct YamlGuardStats {
  int documents = 0;
  int64_t events = 0;
  int64_t expanded_nodes = 0;  // saturates just above the limit
  int aliases = 0;
  int max_depth = 0;
};

/// Runs yaml-cpp's event parser (YAML::Parser with an EventHandler) over `text` and checks the
/// limits and that there is exactly one document. Malformed YAML and exceeded limits are
/// InvalidArgument errors "<source>:<line>:<column>: ...".
Result<YamlGuardStats> GuardYaml(std::string_view text, const std::string& source,
                                 const YamlGuardLimits& limits);

/// "<source>:<line>:<column>: <message>" with 1-based line and column; without them when line is
/// 0.
std::string FormatLocated(const std::string& source, int line, int column, std::string_view msg);

}  // namespace nw
