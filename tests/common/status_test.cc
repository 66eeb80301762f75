#include "common/status.h"

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace nw {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  NW_ASSIGN_OR_RETURN(int h, Half(x));
  NW_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Status::NotFound("model.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "not_found: model.safetensors");
  EXPECT_EQ(s.WithContext("loading").message(), "loading: model.safetensors");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(StatusTest, CodesRoundTripAndRetryability) {
  for (int c = 0; c <= 13; ++c) {
    auto code = static_cast<StatusCode>(c);
    auto back = StatusCodeFromName(StatusCodeName(code));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, code);
  }
  EXPECT_TRUE(IsRetryable(StatusCode::kResourceExhausted));
  EXPECT_TRUE(IsRetryable(StatusCode::kUnavailable));
  EXPECT_FALSE(IsRetryable(StatusCode::kInvalidArgument));
  EXPECT_FALSE(StatusCodeFromName("nope").has_value());
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.HexDigest(), Sha256Hex("abc"));
}

}  // namespace
}  // namespace nw
