#include "engine/cpu/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace nw::cpu {

int32_t PagePool::Allocate() {
  if (!free_.empty()) {
    const int32_t id = free_.back();
    free_.pop_back();
    std::vector<float>& p = pages_[static_cast<size_t>(id)];
    std::fill(p.begin(), p.end(), 0.0f);
    return id;
  }
  pages_.emplace_back(static_cast<size_t>(kPageSize * width_), 0.0f);
  return static_cast<int32_t>(pages_.size() - 1);
}

void PagePool::Free(int32_t page) { free_.push_back(page); }

RowStore RowStore::Contiguous(int64_t width, int64_t ring_capacity, int64_t reserve_rows) {
  RowStore s;
  s.width_ = width;
  s.ring_ = ring_capacity;
  const int64_t rows = ring_capacity > 0 ? ring_capacity : reserve_rows;
  s.data_.assign(static_cast<size_t>(std::max<int64_t>(rows, 0) * width), 0.0f);
  return s;
}

RowStore RowStore::Paged(PagePool* pool, int64_t ring_capacity) {
  RowStore s;
  s.width_ = pool->width();
  s.ring_ = ring_capacity;
  s.pool_ = pool;
  return s;
}

RowStore::RowStore(RowStore&& other) noexcept
    : width_(other.width_),
      ring_(other.ring_),
      data_(std::move(other.data_)),
      pool_(std::exchange(other.pool_, nullptr)),
      block_table_(std::move(other.block_table_)) {
  other.block_table_.clear();
}

RowStore& RowStore::operator=(RowStore&& other) noexcept {
  if (this != &other) {
    Release();
    width_ = other.width_;
    ring_ = other.ring_;
    data_ = std::move(other.data_);
    pool_ = std::exchange(other.pool_, nullptr);
    block_table_ = std::move(other.block_table_);
    other.block_table_.clear();
  }
  return *this;
}

RowStore::~RowStore() { Release(); }

void RowStore::Release() {
  if (pool_ != nullptr) {
    for (int32_t p : block_table_) {
      if (p >= 0) pool_->Free(p);
    }
  }
  block_table_.clear();
}

float* RowStore::MutableRow(int64_t i) {
  const int64_t slot = Slot(i);
  if (pool_ == nullptr) {
    const size_t need = static_cast<size_t>((slot + 1) * width_);
    if (data_.size() < need) data_.resize(std::max(need, 2 * data_.size()), 0.0f);
    return data_.data() + slot * width_;
  }
  const size_t page = static_cast<size_t>(slot / kPageSize);
  if (block_table_.size() <= page) block_table_.resize(page + 1, -1);
  if (block_table_[page] < 0) block_table_[page] = pool_->Allocate();
  return pool_->page(block_table_[page]) + (slot % kPageSize) * width_;
}

const float* RowStore::Row(int64_t i) const {
  const int64_t slot = Slot(i);
  if (pool_ == nullptr) {
    assert(static_cast<size_t>((slot + 1) * width_) <= data_.size());
    return data_.data() + slot * width_;
  }
  const int32_t page = block_table_[static_cast<size_t>(slot / kPageSize)];
  assert(page >= 0);
  return pool_->page(page) + (slot % kPageSize) * width_;
}

}  // namespace nw::cpu
