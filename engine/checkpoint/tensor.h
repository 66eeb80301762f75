// Tensor: an owning fp32 host array with a shape. The CPU reference backend keeps every weight
// dequantized to fp32 in these. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nw {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s) : shape(std::move(s)), data(Numel(shape), 0.0f) {}

  static int64_t Numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  bool empty() const { return data.empty(); }
  int64_t dim(size_t i) const { return shape.at(i); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
  std::string ShapeString() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

}  // namespace nw
