// Test support: assertions on Status and Result<T> (common/status.h) that print the status on
// failure. NW_ASSERT_OK(expr) stops the test, NW_EXPECT_OK(expr) continues.
#pragma once

#include <gtest/gtest.h>

#include "common/status.h"

namespace nw::test_support {

inline Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

}  // namespace nw::test_support

#define NW_ASSERT_OK(expr)                                                                      \
  do {                                                                                          \
    const ::nw::Status nw_assert_ok_status_ = ::nw::test_support::StatusOf(expr);               \
    ASSERT_TRUE(nw_assert_ok_status_.ok()) << #expr << ": " << nw_assert_ok_status_.ToString(); \
  } while (0)

#define NW_EXPECT_OK(expr)                                                                      \
  do {                                                                                          \
    const ::nw::Status nw_expect_ok_status_ = ::nw::test_support::StatusOf(expr);               \
    EXPECT_TRUE(nw_expect_ok_status_.ok()) << #expr << ": " << nw_expect_ok_status_.ToString(); \
  } while (0)
