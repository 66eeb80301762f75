// common/listen_address: the "host:port" parser of nw serve --listen and the dashboard's --http.
#include "common/listen_address.h"

#include <gtest/gtest.h>

namespace nw {
namespace {

TEST(ListenAddressTest, ParsesIpv4Ipv6AndLocalhost) {
  auto a = ParseListenAddress("127.0.0.1:8000", "--listen");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->address().to_string(), "127.0.0.1");
  EXPECT_EQ(a->port(), 8000);
  auto b = ParseListenAddress("[::1]:0", "--listen");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->address().is_v6());
  EXPECT_EQ(b->port(), 0);
  auto c = ParseListenAddress("localhost:65535", "--http");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->address().to_string(), "127.0.0.1");
}

TEST(ListenAddressTest, RefusesWithTheFlagAndTheValue) {
  for (const char* bad : {"8000", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "1.2.3.4:80x",
                          "example.com:80", ":80"}) {
    auto r = ParseListenAddress(bad, "--http");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("--http '") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace nw
