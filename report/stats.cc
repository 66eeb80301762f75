#include "report/stats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace nw::report {

std::string FormatThousands(int64_t v) {
  const bool negative = v < 0;
  // Work on the magnitude as unsigned so INT64_MIN is fine.
  uint64_t m = negative ? ~static_cast<uint64_t>(v) + 1 : static_cast<uint64_t>(v);
  std::string digits = std::to_string(m);
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    out += digits[i];
    const size_t left = n - 1 - i;
    if (left > 0 && left % 3 == 0) out += ',';
  }
  return negative ? "-" + out : out;
}

std::string FormatNumber(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string FormatPosition(double position) {
  if (position < 0) return "end-" + FormatNumber(-position, 0);
  return FormatNumber(position * 100.0, 1) + "%";
}

std::string FormatFraction(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

std::string FormatBusy(double fraction) { return FormatNumber(100.0 * fraction, 1) + "%"; }

std::string FormatPercent(int64_t passes, int64_t n) {
  if (n <= 0) return "-";
  return FormatNumber(100.0 * static_cast<double>(passes) / static_cast<double>(n), 0) + "%";
}

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Compare by value: strip leading zeros, then by length, then lexically.
      size_t ia = i, jb = j;
      while (ia + 1 < ie && a[ia] == '0') ++ia;
      while (jb + 1 < je && b[jb] == '0') ++jb;
      const size_t la = ie - ia, lb = je - jb;
      if (la != lb) return la < lb;
      const int c = a.compare(ia, la, b, jb, lb);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;
}

}  // namespace nw::report
