// The campaign parser's cell plan: the matrix product in axis order, minus exclude, plus include
// (GitHub Actions semantics, docs/campaigns.md), and the cross-axis checks of every cell.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/campaign_parser.h"
#include "coordinator/campaign/job_check.h"
#include "engine/backend_catalog.h"
#include "engine/fault.h"

namespace nw::campaign_internal {

Status Parser::ParseMatrixEntries(const Entry& e, bool include, std::vector<MatrixEntry>* out) {
  if (!e.value.IsSequence()) {
    return Error(e.value, e.path, "must be a list of maps, got " + Describe(e.value));
  }
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string ipath = e.path + "[" + std::to_string(i) + "]";
    NW_ASSIGN_OR_RETURN(std::vector<Entry> fields,
                        MapEntries(item, ipath, include ? Names(kIncludeKeys) : Names(kAxisKeys)));
    if (fields.empty()) {
      return Error(item, ipath,
                   include ? "an include entry names at least one axis or setting"
                           : "an exclude entry names at least one axis (an empty one would "
                             "exclude everything)");
    }
    MatrixEntry m;
    m.where = Loc(item, ipath);
    for (const Entry& f : fields) {
      if (f.key == "max_new_tokens") {
        NW_ASSIGN_OR_RETURN(int64_t t, ReadInt(f.value, f.path, 1, kMaxNewTokens));
        m.max_new_tokens = static_cast<int>(t);
      } else if (f.key == "probe") {
        NW_ASSIGN_OR_RETURN(bool p, ReadBool(f.value, f.path));
        m.probe = p;
      } else {
        const Axis a = *AxisFromName(f.key);
        NW_RETURN_IF_ERROR(ParseAxis(a, f.value, f.path, &m.axes[Ix(a)]));
      }
    }
    out->push_back(std::move(m));
  }
  return Status::Ok();
}

// The cell plan: the matrix product in axis order, minus exclude, plus include (GitHub Actions
// semantics, see docs/campaigns.md).
Status Parser::Plan(const YAML::Node& matrix_node) {
  c_.values = c_.matrix;
  const int64_t trials = static_cast<int64_t>(c_.trial_seeds.size());
  const SourceLocation matrix_where = Loc(matrix_node, "matrix");
  c_.matrix_where = matrix_where;

  int64_t product = 1;
  for (Axis a : kAllAxes) {
    product *= static_cast<int64_t>(c_.matrix[Ix(a)].size());
    if (product > kMaxMatrixCombinations) {
      return Error(matrix_where, "the matrix has more than " +
                                     std::to_string(kMaxMatrixCombinations) + " combinations");
    }
  }
  // Matching exclude and include entries against the combinations is a product of their counts:
  // bounded as a whole, before it can run for minutes.
  int64_t steps = 0;
  auto spend = [&](int64_t n, const SourceLocation& where) -> Status {
    steps += n;
    if (steps <= kMaxPlanSteps) return Status::Ok();
    return Error(where, "matching the matrix (" + std::to_string(product) +
                            " combinations) against " + std::to_string(c_.exclude.size()) +
                            " exclude and " + std::to_string(c_.include.size()) +
                            " include entries takes more than " + std::to_string(kMaxPlanSteps) +
                            " steps; narrow the matrix or use fewer, broader entries");
  };
  auto check_ceiling = [&](const SourceLocation& where) -> Status {
    if (static_cast<int64_t>(c_.cells.size()) * trials > kMaxJobsCeiling) {
      return Error(where, "the campaign expands to more than " + std::to_string(kMaxJobsCeiling) +
                              " jobs, the most any campaign may have");
    }
    return Status::Ok();
  };

  // For each exclude entry and axis: which matrix values it names (empty: every value).
  struct Mask {
    std::array<std::vector<char>, kNumAxes> allowed;
    int64_t hits = 0;
  };
  std::vector<Mask> masks(c_.exclude.size());
  for (size_t e = 0; e < c_.exclude.size(); ++e) {
    for (Axis a : kAllAxes) {
      const AxisValues& named = c_.exclude[e].axes[Ix(a)];
      if (named.empty()) continue;
      auto& m = masks[e].allowed[Ix(a)];
      NW_RETURN_IF_ERROR(
          spend(static_cast<int64_t>(c_.matrix[Ix(a)].size() * named.size()), c_.exclude[e].where));
      m.assign(c_.matrix[Ix(a)].size(), 0);
      for (size_t i = 0; i < c_.matrix[Ix(a)].size(); ++i) {
        for (const AxisValue& v : named) {
          if (v.value == c_.matrix[Ix(a)][i].value) m[i] = 1;
        }
      }
    }
  }

  Cell cell;
  cell.max_new_tokens = c_.max_new_tokens;
  cell.probe = c_.probe;
  for (int64_t k = 0; k < product; ++k) {
    NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(masks.size()), matrix_where));
    bool excluded = false;
    for (Mask& m : masks) {
      bool match = true;
      for (size_t a = 0; a < kNumAxes && match; ++a) {
        if (!m.allowed[a].empty() && !m.allowed[a][cell.index[a]]) match = false;
      }
      if (match) {
        ++m.hits;
        excluded = true;
      }
    }
    if (!excluded) {
      c_.cells.push_back(cell);
      NW_RETURN_IF_ERROR(check_ceiling(matrix_where));
    }
    for (size_t a = kNumAxes; a-- > 0;) {  // odometer: needle_position turns fastest
      if (++cell.index[a] < c_.matrix[a].size()) break;
      cell.index[a] = 0;
    }
  }
  for (size_t e = 0; e < masks.size(); ++e) {
    if (masks[e].hits == 0) {
      const SourceLocation& w = c_.exclude[e].where;
      c_.warnings.push_back(
          FormatLocated(source_, w.line, w.column, w.path + ": matches no combination"));
    }
  }

  for (size_t e = 0; e < c_.include.size(); ++e) {
    const MatrixEntry& inc = c_.include[e];
    // Indices of the named values in the value tables (values new to an axis are appended).
    std::array<std::vector<uint32_t>, kNumAxes> named;
    for (Axis a : kAllAxes) {
      AxisValues& table = c_.values[Ix(a)];
      for (const AxisValue& v : inc.axes[Ix(a)]) {
        NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(table.size()), inc.where));
        size_t i = 0;
        while (i < table.size() && !(table[i].value == v.value)) ++i;
        if (i == table.size()) table.push_back(v);
        named[Ix(a)].push_back(static_cast<uint32_t>(i));
      }
    }
    auto apply = [&](Cell& target) {
      if (inc.max_new_tokens) target.max_new_tokens = *inc.max_new_tokens;
      if (inc.probe) target.probe = *inc.probe;
    };
    // Created cells take the matrix's values on the axes the entry does not name; an exclude
    // entry that names one of those axes still removes them.
    auto excluded_fill = [&](const Cell& created) {
      for (const MatrixEntry& ex : c_.exclude) {
        bool names_fill = false;
        bool match = true;
        for (Axis a : kAllAxes) {
          const AxisValues& vals = ex.axes[Ix(a)];
          if (vals.empty()) continue;
          if (inc.axes[Ix(a)].empty()) names_fill = true;
          const AxisValue& cv = c_.values[Ix(a)][created.index[Ix(a)]];
          if (std::none_of(vals.begin(), vals.end(),
                           [&](const AxisValue& v) { return v.value == cv.value; })) {
            match = false;
            break;
          }
        }
        if (match && names_fill) return true;
      }
      return false;
    };

    // Each combination of the entry's listed values is one include item.
    std::array<size_t, kNumAxes> pick{};
    bool any_created = false;
    bool any_extended = false;
    for (;;) {
      NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(c_.cells.size()), inc.where));
      std::vector<Cell*> matched;
      for (Cell& existing : c_.cells) {
        bool match = true;
        for (size_t a = 0; a < kNumAxes && match; ++a) {
          if (!named[a].empty() && existing.index[a] != named[a][pick[a]]) match = false;
        }
        if (match) matched.push_back(&existing);
      }
      if (!matched.empty()) {
        for (Cell* m : matched) apply(*m);
        any_extended = true;
      } else {
        // New cells: the named values, crossed with the matrix values of the other axes.
        Cell created;
        created.max_new_tokens = c_.max_new_tokens;
        created.probe = c_.probe;
        created.include = static_cast<int>(e);
        apply(created);
        std::array<size_t, kNumAxes> fill{};
        for (;;) {
          NW_RETURN_IF_ERROR(spend(1 + static_cast<int64_t>(c_.exclude.size()), inc.where));
          for (size_t a = 0; a < kNumAxes; ++a) {
            created.index[a] =
                named[a].empty() ? static_cast<uint32_t>(fill[a]) : named[a][pick[a]];
          }
          if (!excluded_fill(created)) {
            c_.cells.push_back(created);
            any_created = true;
            NW_RETURN_IF_ERROR(check_ceiling(inc.where));
          }
          size_t a = kNumAxes;
          while (a-- > 0) {
            if (!named[a].empty()) continue;
            if (++fill[a] < c_.matrix[a].size()) break;
            fill[a] = 0;
          }
          if (a == static_cast<size_t>(-1)) break;
        }
      }
      size_t a = kNumAxes;
      while (a-- > 0) {
        if (named[a].empty()) continue;
        if (++pick[a] < named[a].size()) break;
        pick[a] = 0;
      }
      if (a == static_cast<size_t>(-1)) break;
    }
    if (!any_created && any_extended && !inc.max_new_tokens && !inc.probe) {
      c_.warnings.push_back(FormatLocated(
          source_, inc.where.line, inc.where.column,
          inc.where.path + ": names only existing combinations and sets nothing; it adds no jobs"));
    }
  }
  if (c_.cells.empty()) return Error(matrix_where, "exclude removes every combination");
  return Status::Ok();
}

// Cross-axis rules each cell must satisfy: a negative needle offset must fit in the context.
Status Parser::CheckCells() const {
  for (const Cell& cell : c_.cells) {
    // A fault runs only on a backend that replays it (its catalog entry's faults; http: none).
    const AxisValue& fault = c_.value(cell, Axis::kFault);
    if (fault.name() != "none") {
      const AxisValue& backend = c_.value(cell, Axis::kBackend);
      const BackendInfo* info = FindBackend(backend.name());
      const Fault f = *ParseFault(fault.name());
      const Status ok =
          info != nullptr
              ? CheckBackendFault(*info, f)
              : Status::Unsupported("backend '" + backend.name() + "' replays no fault");
      if (!ok.ok()) {
        return Error(fault.where, ok.message() + " (backend from " + At(backend.where) +
                                      "); exclude the combination");
      }
    }
    const AxisValue& pos = c_.value(cell, Axis::kNeedlePosition);
    const AxisValue& len = c_.value(cell, Axis::kContextLength);
    if (pos.number() < 0 && -pos.number() >= static_cast<double>(len.integer())) {
      return Error(pos.where, "offset " + pos.ToString() +
                                  " puts the needle before the start of "
                                  "a " +
                                  Plural(len.integer(), "token") + " context (" + At(len.where) +
                                  "); drop one of them or exclude the combination");
    }
  }
  return CheckHttpCells();
}

}  // namespace nw::campaign_internal
