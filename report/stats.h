// Small numeric helpers for reports: the Wilson score interval for a pass rate and the number
// formats used in every renderer (thousands separators, needle positions, rates).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/wilson.h"

namespace nw::report {

using nw::Interval;  // common/wilson.h
using nw::kZ95;
using nw::WilsonInterval;

/// 1234567 -> "1,234,567"; -4509 -> "-4,509".
std::string FormatThousands(int64_t v);
/// A needle position: a fraction 0..1 as a percentage ("0%", "33.3%", "100%"), a negative value
/// as a token offset from the end of the context ("end-512").
std::string FormatPosition(double position);
/// A number with at most `decimals` decimals and no trailing zeros ("4", "17.5").
std::string FormatNumber(double v, int decimals = 1);
/// "0.18" (two decimals), used for interval bounds.
std::string FormatFraction(double v);
/// passes / n as a whole percentage ("95%"); "-" when n is 0.
std::string FormatPercent(int64_t passes, int64_t n);
/// A busy fraction 0..1 as a percentage with one decimal ("91.3%", "0%").
std::string FormatBusy(double fraction);

/// Orders strings with embedded numbers by value ("topk=8" before "topk=16").
bool NaturalLess(const std::string& a, const std::string& b);

}  // namespace nw::report
