#pragma once
// "host:port" listen addresses of the HTTP servers (nw serve --listen, the dashboard's --http).
// Thread-safety: a pure function.

#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nw {

/// "host:port" -> endpoint: IPv4, IPv6 as "[::1]:8000", "localhost" as 127.0.0.1; port 0..65535
/// (0: any free port). Errors name `flag` and the value, e.g. "--listen 'x': expected host:port".
Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(const std::string& listen,
                                                          std::string_view flag);

}  // namespace nw
