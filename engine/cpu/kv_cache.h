// KV-cache storage of the CPU reference backend: rows of floats addressed by a logical index, in
// a contiguous or a paged layout.
//
// Each attention layer of a request keeps up to three row stores (see sequence.h):
//   window      raw KV of the last window_size tokens, a ring: token p lives in slot p % window;
//   compressed  compressed KV entries 0, 1, ... of the layer's compressor (ratio > 0);
//   index keys  the indexer compressor's entries (ratio 4), read by the indexer.
// Contiguous layout: one growable buffer per store (reserved up front, so row pointers stay valid).
// Paged layout: pages of kPageSize rows from a PagePool, found through the store's block table
// (logical page -> pool page). Both layouts hold bit-identical values; only addressing differs.
// Thread-safety: not thread-safe; a request's stores and its pools belong to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace nw::cpu {

inline constexpr int64_t kPageSize = 64;  // rows per page

/// Fixed-size pages of kPageSize rows x width floats; freed pages are reused.
class PagePool {
 public:
  explicit PagePool(int64_t width) : width_(width) {}
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t width() const { return width_; }
  /// Returns a zero-filled page id.
  int32_t Allocate();
  void Free(int32_t page);
  float* page(int32_t id) { return pages_[static_cast<size_t>(id)].data(); }
  const float* page(int32_t id) const { return pages_[static_cast<size_t>(id)].data(); }
  int64_t pages_in_use() const { return static_cast<int64_t>(pages_.size() - free_.size()); }

 private:
  int64_t width_;
  std::vector<std::vector<float>> pages_;
  std::vector<int32_t> free_;
};

/// Rows of `width` floats. ring_capacity > 0 makes it a ring: row i lives in slot
/// i % ring_capacity (only the last ring_capacity rows are kept).
class RowStore {
 public:
  RowStore() = default;
  /// Contiguous buffer; `reserve_rows` rows are allocated up front (row pointers stay valid until
  /// the store grows past them).
  static RowStore Contiguous(int64_t width, int64_t ring_capacity, int64_t reserve_rows);
  /// Paged through `pool` (not owned; must outlive the store). Pages are returned on destruction.
  static RowStore Paged(PagePool* pool, int64_t ring_capacity);

  RowStore(RowStore&& other) noexcept;
  RowStore& operator=(RowStore&& other) noexcept;
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;
  ~RowStore();

  int64_t width() const { return width_; }
  bool paged() const { return pool_ != nullptr; }
  /// The row's storage, allocated (zero-filled) on first touch.
  float* MutableRow(int64_t i);
  /// A row that was written before.
  const float* Row(int64_t i) const;
  /// Calls fn(first_row, rows, count) over the maximal runs of rows of [begin, end) that are
  /// adjacent in memory: one run for a contiguous store, one per page for a paged store.
  /// Not for rings.
  template <typename Fn>
  void ForEachRun(int64_t begin, int64_t end, Fn&& fn) const {
    while (begin < end) {
      int64_t count = end - begin;
      if (paged()) count = std::min(count, kPageSize - begin % kPageSize);
      fn(begin, Row(begin), count);
      begin += count;
    }
  }
  /// Bytes of the contiguous buffer (0 for a paged store: its pages belong to the pool).
  int64_t contiguous_bytes() const { return static_cast<int64_t>(data_.size() * sizeof(float)); }
  /// Pages held in the block table (paged layout).
  int64_t pages() const { return static_cast<int64_t>(block_table_.size()); }

 private:
  void Release();
  int64_t Slot(int64_t i) const { return ring_ > 0 ? i % ring_ : i; }

  int64_t width_ = 0;
  int64_t ring_ = 0;
  std::vector<float> data_;           // contiguous layout
  PagePool* pool_ = nullptr;          // paged layout
  std::vector<int32_t> block_table_;  // logical page -> pool page (-1: not allocated)
};

}  // namespace nw::cpu
