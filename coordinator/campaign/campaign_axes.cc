// The campaign parser's axis values: scalars (names, integers, positions), linear and geometric
// ranges, and their range checks.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/campaign_parser.h"
#include "coordinator/campaign/job_check.h"
#include "engine/backend_catalog.h"
#include "task/niah.h"

namespace nw::campaign_internal {

Status Parser::ParseAxis(Axis axis, const YAML::Node& n, const std::string& path, AxisValues* out) {
  AxisValues values;
  if (n.IsSequence()) {
    if (n.size() == 0) return Error(n, path, "must not be empty");
    for (size_t i = 0; i < n.size(); ++i) {
      NW_RETURN_IF_ERROR(ParseAxisItem(axis, n[i], path + "[" + std::to_string(i) + "]", &values));
    }
  } else {
    NW_RETURN_IF_ERROR(ParseAxisItem(axis, n, path, &values));
  }
  std::map<std::variant<std::string, int64_t, double>, size_t> seen;
  for (size_t i = 0; i < values.size(); ++i) {
    auto [it, inserted] = seen.emplace(values[i].value, i);
    if (!inserted) {
      return Error(values[i].where, "duplicate value " + values[i].ToString() + " (also " +
                                        At(values[it->second].where) + ")");
    }
  }
  *out = std::move(values);
  return Status::Ok();
}

Status Parser::ParseAxisItem(Axis axis, const YAML::Node& n, const std::string& path,
                             AxisValues* out) {
  if (axis == Axis::kBackend && options_.allow_http && IsHttpMap(n)) {
    return ParseHttpBackend(n, path, out);
  }
  if (n.IsMap()) return ParseRange(axis, n, path, out);
  if (n.IsSequence()) return Error(n, path, "lists inside lists are not allowed");
  NW_ASSIGN_OR_RETURN(AxisValue v, ParseAxisScalar(axis, n, path));
  out->push_back(std::move(v));
  return Status::Ok();
}

Result<AxisValue> Parser::ParseAxisScalar(Axis axis, const YAML::Node& n,
                                          const std::string& path) const {
  AxisValue v;
  v.where = Loc(n, path);
  switch (axis) {
    case Axis::kTask: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      auto t = ParseNiahTask(s);
      if (!t.ok()) {
        std::vector<std::string> known;
        for (NiahTask k : {NiahTask::kSingle, NiahTask::kMultikey, NiahTask::kRepeat}) {
          known.emplace_back(NiahTaskName(k));
        }
        return Error(n, path, "unknown task '" + s + "' (expected " + ListNames(known) + ")");
      }
      v.value = std::string(NiahTaskName(*t));
      return v;
    }
    case Axis::kHaystack: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      auto h = ParseNiahHaystack(s);
      if (!h.ok()) {
        std::vector<std::string> known;
        for (NiahHaystack k :
             {NiahHaystack::kNoise, NiahHaystack::kEssay, NiahHaystack::kNeedles}) {
          known.emplace_back(NiahHaystackName(k));
        }
        return Error(n, path, "unknown haystack '" + s + "' (expected " + ListNames(known) + ")");
      }
      v.value = std::string(NiahHaystackName(*h));
      return v;
    }
    case Axis::kBackend: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      const auto& known = options_.backends;
      if (s == "http" && options_.allow_http) {  // the campaign's {http: {...}} backend
        v.value = s;
        return v;
      }
      if (std::find(known.begin(), known.end(), s) == known.end()) {
        return Error(n, path, "unknown backend '" + s + "' (expected " + ListNames(known) + ")");
      }
      v.value = s;
      return v;
    }
    case Axis::kPrecision: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      if (!custom_.count(s) && !NamedPrecisionProfile(s).ok()) {
        std::string msg = "unknown precision profile '" + s +
                          "' (built-in: " + ListNames(NamedPrecisionProfileNames());
        if (!c_.custom_precisions.empty()) {
          msg += "; defined under precisions: " + ListNames(c_.custom_precisions);
        }
        return Error(n, path, msg + ")");
      }
      v.value = s;
      return v;
    }
    case Axis::kFault: {
      NW_ASSIGN_OR_RETURN(std::string s, ReadString(n, path));
      if (!ParseFault(s).ok()) {
        return Error(
            n, path,
            "unknown fault '" + s + "' (expected " + ListNames(FaultNames()) + "; docs/faults.md)");
      }
      v.value = s;
      return v;
    }
    case Axis::kTopk: {
      NW_ASSIGN_OR_RETURN(int64_t k, ReadInt(n, path, 1, kMaxTopk));
      v.value = k;
      return v;
    }
    case Axis::kContextLength: {
      NW_ASSIGN_OR_RETURN(int64_t len, ReadInt(n, path, 1, kMaxContextLength));
      v.value = len;
      return v;
    }
    case Axis::kNeedlePosition: {
      NW_ASSIGN_OR_RETURN(double pos, ReadDouble(n, path));
      v.value = pos;
      NW_RETURN_IF_ERROR(CheckNumber(axis, v));
      return v;
    }
  }
  return Status::Internal("unhandled axis");
}

// Range checks shared by scalars and range-generated values.
Status Parser::CheckNumber(Axis axis, const AxisValue& v) const {
  if (axis == Axis::kNeedlePosition) {
    const double pos = v.number();
    if (pos > 1) {
      return Error(v.where,
                   "must be a fraction in [0, 1] or a negative token offset such as -30, "
                   "got " +
                       v.ToString());
    }
    if (pos < 0 && pos != std::floor(pos)) {
      return Error(v.where,
                   "a negative position counts tokens from the end and must be a whole "
                   "number (such as -30), got " +
                       v.ToString());
    }
    if (pos < -static_cast<double>(kMaxContextLength)) {
      return Error(v.where, "offset " + v.ToString() + " is longer than any context");
    }
    return Status::Ok();
  }
  const int64_t max = axis == Axis::kTopk ? kMaxTopk : kMaxContextLength;
  const int64_t x = v.integer();
  if (x < 1) return Error(v.where, "must be >= 1, got " + std::to_string(x));
  if (x > max) {
    return Error(v.where, "must be <= " + std::to_string(max) + ", got " + std::to_string(x));
  }
  return Status::Ok();
}

Status Parser::ParseRange(Axis axis, const YAML::Node& n, const std::string& path,
                          AxisValues* out) const {
  if (IsNameAxis(axis)) {
    return Error(n, path, "must be a name or a list of names, got " + Describe(n));
  }
  NW_ASSIGN_OR_RETURN(std::vector<Entry> kind, MapEntries(n, path, kRangeKinds));
  if (kind.size() != 1) {
    return Error(n, path, "a range is a map with one key, linear or geometric");
  }
  const Entry& r = kind[0];
  const bool geometric = r.key == "geometric";
  const bool integral = IsIntegralAxis(axis);
  if (geometric && !integral) {
    return Error(r.key_node, r.path,
                 "geometric ranges are for context_length and topk; use linear or a list");
  }
  const Names keys = geometric ? Names(kGeometricKeys) : Names(kLinearKeys);
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(r.value, r.path, keys));
  const Entry* from = nullptr;
  const Entry* to = nullptr;
  const Entry* step = nullptr;  // step, factor or count
  for (const Entry& f : fields) {
    if (f.key == "from") {
      from = &f;
    } else if (f.key == "to") {
      to = &f;
    } else if (step != nullptr) {
      return Error(
          f.key_node, f.path,
          "give one of " + std::string(geometric ? "factor" : "step") + " and count, not both");
    } else {
      step = &f;
    }
  }
  if (from == nullptr || to == nullptr || step == nullptr) {
    return Error(r.value, r.path,
                 std::string("a ") + r.key + " range needs from, to and " +
                     (geometric ? "factor" : "step") + " or count");
  }

  const SourceLocation where = Loc(n, path);
  std::vector<AxisValue> generated;
  auto emit = [&](std::variant<std::string, int64_t, double> value) -> Status {
    if (static_cast<int64_t>(generated.size()) >= kMaxRangeValues) {
      return Error(where,
                   "the range yields more than " + std::to_string(kMaxRangeValues) + " values");
    }
    AxisValue v;
    v.value = std::move(value);
    v.where = where;
    NW_RETURN_IF_ERROR(CheckNumber(axis, v));
    generated.push_back(std::move(v));
    return Status::Ok();
  };
  auto check_distinct = [&](std::string_view hint) -> Status {
    for (size_t i = 1; i < generated.size(); ++i) {
      if (generated[i].value == generated[i - 1].value) {
        return Error(where, "the range yields " + generated[i].ToString() +
                                " twice after rounding to whole numbers; " + std::string(hint));
      }
    }
    return Status::Ok();
  };

  if (integral) {
    NW_ASSIGN_OR_RETURN(int64_t lo, ReadInt(from->value, from->path, 1, INT64_MAX));
    NW_ASSIGN_OR_RETURN(int64_t hi, ReadInt(to->value, to->path, 1, INT64_MAX));
    if (hi < lo) return Error(to->value, to->path, "must be >= from (" + std::to_string(lo) + ")");
    if (step->key == "count") {
      NW_ASSIGN_OR_RETURN(int64_t count, ReadInt(step->value, step->path, 1, kMaxRangeValues));
      if (count == 1 && hi != lo) {
        return Error(step->value, step->path, "must be >= 2 when from and to differ");
      }
      for (int64_t i = 0; i < count; ++i) {
        double x;
        if (i == 0 || count == 1) {
          x = static_cast<double>(lo);
        } else if (i == count - 1) {
          x = static_cast<double>(hi);
        } else if (geometric) {
          x = static_cast<double>(lo) *
              std::pow(static_cast<double>(hi) / static_cast<double>(lo),
                       static_cast<double>(i) / static_cast<double>(count - 1));
        } else {
          x = static_cast<double>(lo) + static_cast<double>(hi - lo) * static_cast<double>(i) /
                                            static_cast<double>(count - 1);
        }
        NW_RETURN_IF_ERROR(emit(static_cast<int64_t>(std::llround(x))));
      }
      NW_RETURN_IF_ERROR(check_distinct("lower count"));
    } else if (geometric) {
      NW_ASSIGN_OR_RETURN(double factor, ReadDouble(step->value, step->path));
      if (!(factor > 1)) {
        return Error(step->value, step->path, "must be > 1, got " + FormatDouble(factor));
      }
      const double limit = static_cast<double>(hi) * (1 + 1e-12);
      for (int64_t i = 0;; ++i) {
        const double x = static_cast<double>(lo) * std::pow(factor, static_cast<double>(i));
        if (x > limit) break;
        NW_RETURN_IF_ERROR(emit(static_cast<int64_t>(std::llround(x))));
      }
      NW_RETURN_IF_ERROR(check_distinct("raise factor"));
    } else {
      NW_ASSIGN_OR_RETURN(int64_t s, ReadInt(step->value, step->path, 1, INT64_MAX));
      if ((hi - lo) / s + 1 > kMaxRangeValues) {
        return Error(where,
                     "the range yields more than " + std::to_string(kMaxRangeValues) + " values");
      }
      for (int64_t x = lo; x <= hi; x += s) {
        NW_RETURN_IF_ERROR(emit(x));
        if (x > hi - s) break;  // no overflow past hi
      }
    }
  } else {
    NW_ASSIGN_OR_RETURN(double lo, ReadDouble(from->value, from->path));
    NW_ASSIGN_OR_RETURN(double hi, ReadDouble(to->value, to->path));
    if (hi < lo) return Error(to->value, to->path, "must be >= from (" + FormatDouble(lo) + ")");
    // Values sit on a 1e-9 grid so 0.1 steps give the same doubles as writing 0.3 by hand.
    auto snap = [](double x) {
      const double s = std::round(x * 1e9) / 1e9;
      return s == 0 ? 0.0 : s;
    };
    if (step->key == "count") {
      NW_ASSIGN_OR_RETURN(int64_t count, ReadInt(step->value, step->path, 1, kMaxRangeValues));
      if (count == 1 && hi != lo) {
        return Error(step->value, step->path, "must be >= 2 when from and to differ");
      }
      for (int64_t i = 0; i < count; ++i) {
        const double x =
            count == 1 ? lo
                       : lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(count - 1);
        NW_RETURN_IF_ERROR(emit(i == count - 1 ? hi : snap(x)));
      }
      for (size_t i = 1; i < generated.size(); ++i) {
        if (generated[i].value == generated[i - 1].value) {
          return Error(where,
                       "the range yields " + generated[i].ToString() + " twice; lower count");
        }
      }
    } else {
      NW_ASSIGN_OR_RETURN(double s, ReadDouble(step->value, step->path));
      if (!(s > 0)) return Error(step->value, step->path, "must be > 0, got " + FormatDouble(s));
      const double steps = std::floor((hi - lo) / s + 1e-9);
      if (steps + 1 > static_cast<double>(kMaxRangeValues)) {
        return Error(where,
                     "the range yields more than " + std::to_string(kMaxRangeValues) + " values");
      }
      const int64_t n_values = static_cast<int64_t>(steps) + 1;
      for (int64_t i = 0; i < n_values; ++i) {
        NW_RETURN_IF_ERROR(emit(snap(lo + s * static_cast<double>(i))));
      }
    }
  }
  for (AxisValue& v : generated) out->push_back(std::move(v));
  return Status::Ok();
}

}  // namespace nw::campaign_internal
