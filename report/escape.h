// Escaping for the formats the reports write: CSV fields (nw query, nw export), and HTML / XML
// text and attribute values (nw report --format html, nw gate's JUnit XML). One definition each.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace nw::report {

/// An RFC 4180 field: as it is unless it holds a comma, a quote, CR or LF; then quoted, with
/// each quote doubled.
std::string CsvField(std::string_view s);

/// &, <, >, " and ' as entities. kHtml writes ' as &#39; and passes every other byte; kXml
/// writes ' as &apos; and replaces the control characters XML 1.0 forbids (below 0x20 except
/// tab, LF and CR) with '?'.
enum class Markup { kHtml, kXml };
std::string EscapeMarkup(std::string_view s, Markup markup);

}  // namespace nw::report
