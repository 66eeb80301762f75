// Row stores: contiguous vs paged addressing, rings, page reuse, contiguous runs.
#include "engine/cpu/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace nw::cpu {
namespace {

void Fill(RowStore& s, int64_t row) {
  float* r = s.MutableRow(row);
  for (int64_t c = 0; c < s.width(); ++c) r[c] = static_cast<float>(row * 1000 + c);
}

bool Holds(const RowStore& s, int64_t row) {
  const float* r = s.Row(row);
  for (int64_t c = 0; c < s.width(); ++c) {
    if (r[c] != static_cast<float>(row * 1000 + c)) return false;
  }
  return true;
}

TEST(RowStoreTest, ContiguousAndPagedHoldTheSameRows) {
  PagePool pool(3);
  RowStore c = RowStore::Contiguous(3, 0, 10);  // grows past the reservation
  RowStore p = RowStore::Paged(&pool, 0);
  for (int64_t i = 0; i < 200; ++i) {
    Fill(c, i);
    Fill(p, i);
  }
  for (int64_t i = 0; i < 200; ++i) {
    EXPECT_TRUE(Holds(c, i));
    EXPECT_TRUE(Holds(p, i));
  }
  EXPECT_EQ(p.pages(), 4);  // 200 rows / 64 per page
  EXPECT_EQ(pool.pages_in_use(), 4);
  EXPECT_FALSE(c.paged());
  EXPECT_TRUE(p.paged());
}

TEST(RowStoreTest, RingsKeepTheLastRows) {
  PagePool pool(2);
  for (bool paged : {false, true}) {
    RowStore s = paged ? RowStore::Paged(&pool, 128) : RowStore::Contiguous(2, 128, 0);
    for (int64_t i = 0; i < 1000; ++i) Fill(s, i);
    for (int64_t i = 1000 - 128; i < 1000; ++i) EXPECT_TRUE(Holds(s, i)) << i;
    if (paged) {
      EXPECT_EQ(s.pages(), 2);
    }
  }
  EXPECT_EQ(pool.pages_in_use(), 0);  // the paged ring returned its pages
}

TEST(RowStoreTest, PagesAreReturnedAndReusedZeroed) {
  PagePool pool(4);
  {
    RowStore s = RowStore::Paged(&pool, 0);
    for (int64_t i = 0; i < 130; ++i) Fill(s, i);
    EXPECT_EQ(pool.pages_in_use(), 3);
    RowStore moved = std::move(s);  // ownership moves, pages stay
    EXPECT_EQ(pool.pages_in_use(), 3);
    EXPECT_TRUE(Holds(moved, 129));
  }
  EXPECT_EQ(pool.pages_in_use(), 0);
  RowStore again = RowStore::Paged(&pool, 0);
  const float* r = again.MutableRow(5);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(r[c], 0.0f);
  EXPECT_EQ(pool.pages_in_use(), 1);
}

TEST(RowStoreTest, ForEachRunSplitsAtPageBoundariesOnly) {
  PagePool pool(1);
  RowStore p = RowStore::Paged(&pool, 0);
  RowStore c = RowStore::Contiguous(1, 0, 300);
  for (int64_t i = 0; i < 300; ++i) {
    Fill(p, i);
    Fill(c, i);
  }
  std::vector<std::pair<int64_t, int64_t>> runs;
  p.ForEachRun(10, 200, [&](int64_t first, const float* rows, int64_t count) {
    runs.push_back({first, count});
    for (int64_t k = 0; k < count; ++k) EXPECT_EQ(rows[k], static_cast<float>((first + k) * 1000));
  });
  EXPECT_EQ(runs,
            (std::vector<std::pair<int64_t, int64_t>>{{10, 54}, {64, 64}, {128, 64}, {192, 8}}));
  runs.clear();
  c.ForEachRun(10, 200, [&](int64_t first, const float*, int64_t count) {
    runs.push_back({first, count});
  });
  EXPECT_EQ(runs, (std::vector<std::pair<int64_t, int64_t>>{{10, 190}}));
}

}  // namespace
}  // namespace nw::cpu
