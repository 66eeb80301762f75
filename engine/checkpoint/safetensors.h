// safetensors: a validating, memory-mapped reader (one file or a sharded index) and a writer.
//
// Format (docs/checkpoint-format.md §4): u64 LE header length N, N bytes of UTF-8 JSON, then the
// byte buffer. The reader treats every file as hostile: N is capped at 100,000,000 and must fit the
// file; the header must be a JSON object without duplicate keys; __metadata__ maps strings to
// strings; every tensor has a known dtype, a shape of non-negative integers and data_offsets
// [begin, end] within the buffer whose length equals numel * bits / 8 (whole bytes,
// overflow-checked); the tensors tile the buffer from 0 with no gap or overlap and end exactly at
// the end of the file. Every error names the file and, where there is one, the tensor.
//
// The writer sorts tensors by descending dtype alignment then name, pads the header with spaces to
// a multiple of 8 and can split a model into model-0000K-of-0000N.safetensors shards plus
// model.safetensors.index.json.
//
// Thread-safety: MappedFile, SafetensorsArchive are immutable after Open and may be read from
// many threads; the spans they hand out live as long as the object (moves keep them valid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

/// Every dtype the safetensors format defines (tensor.rs), with its width in bits.
enum class StDtype : uint8_t {
  kBool,
  kF4,
  kF6E2M3,
  kF6E3M2,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

/// The on-disk string ("BF16", "F8_E4M3", ...).
std::string_view StDtypeName(StDtype d);
std::optional<StDtype> ParseStDtype(std::string_view name);
/// Bits per element: 4 (F4), 6 (F6_*), 8, 16, 32 or 64.
int StDtypeBits(StDtype d);
/// Natural alignment in bytes (1 for sub-byte types): the writer's sort key.
int StDtypeAlignment(StDtype d);
/// Bytes of a tensor: numel * bits / 8. Errors when a dimension is negative, the product
/// overflows 64 bits, or the bit count is not a whole number of bytes.
Result<uint64_t> StTensorBytes(StDtype d, const std::vector<int64_t>& shape);
/// "[2,3]".
std::string ShapeToString(const std::vector<int64_t>& shape);

/// A read-only memory map of a whole file (RAII; move-only).
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::filesystem::path& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  void Reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // false for an empty file (nothing to unmap)
  std::filesystem::path path_;
};

/// One tensor entry of a header. offset is absolute within the file.
struct StEntry {
  std::string name;
  StDtype dtype = StDtype::kU8;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct StHeader {
  std::map<std::string, std::string> metadata;  // __metadata__
  std::vector<StEntry> entries;                 // sorted by name
  uint64_t data_start = 0;                      // 8 + N
};

/// Parses and fully validates a safetensors file image; `source` names it in errors.
Result<StHeader> ParseSafetensors(std::span<const uint8_t> file, const std::string& source);

/// A tensor as stored: its bytes point into the archive's mapping.
struct StTensor {
  std::string name;
  StDtype dtype = StDtype::kU8;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  std::string file;  // file name, for messages

  int64_t numel() const;
};

/// name -> tensor over one safetensors file or the shards of an index.
class SafetensorsArchive {
 public:
  /// `path` is a .safetensors file, a model.safetensors.index.json, or a folder holding exactly
  /// one of model.safetensors / model.safetensors.index.json.
  static Result<SafetensorsArchive> Open(const std::filesystem::path& path);
  /// One file.
  static Result<SafetensorsArchive> OpenFile(const std::filesystem::path& file);
  /// An index: {"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard file}}. Every
  /// shard must exist next to the index, every mapped tensor must be in its shard and every
  /// shard tensor must be mapped to that shard, and total_size must equal the tensor bytes.
  static Result<SafetensorsArchive> OpenIndex(const std::filesystem::path& index);

  SafetensorsArchive(SafetensorsArchive&&) noexcept = default;
  SafetensorsArchive& operator=(SafetensorsArchive&&) noexcept = default;
  SafetensorsArchive(const SafetensorsArchive&) = delete;
  SafetensorsArchive& operator=(const SafetensorsArchive&) = delete;

  const StTensor* Find(const std::string& name) const;
  /// NotFound naming the tensor and the archive when absent.
  Result<StTensor> Get(const std::string& name) const;
  bool Contains(const std::string& name) const { return Find(name) != nullptr; }
  /// Tensor names, sorted.
  std::vector<std::string> Names() const;
  size_t size() const { return tensors_.size(); }
  /// Sum of all tensor byte sizes.
  uint64_t total_bytes() const;
  /// The safetensors files, in the order opened.
  std::vector<std::filesystem::path> files() const;
  /// The path Open was given (for messages).
  const std::string& source() const { return source_; }
  /// __metadata__ of each file, keyed by file name.
  const std::map<std::string, std::map<std::string, std::string>>& metadata() const {
    return metadata_;
  }

 private:
  SafetensorsArchive() = default;
  Status AddFile(const std::filesystem::path& file, StHeader* header_out);

  std::string source_;
  std::vector<MappedFile> files_;
  std::map<std::string, StTensor> tensors_;
  std::map<std::string, std::map<std::string, std::string>> metadata_;
};

// ---- Writer ----------------------------------------------------------------------------------

struct StWriteTensor {
  std::string name;
  StDtype dtype = StDtype::kU8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // exactly StTensorBytes(dtype, shape) bytes, little-endian
};

struct StWriteOptions {
  bool pt_metadata = true;  // write __metadata__ {"format": "pt"}
};

/// The complete file image (header + data) for `tensors`; checks names are unique and non-empty,
/// "__metadata__" is not used as a name, and each data size matches dtype x shape.
Result<std::string> SerializeSafetensors(const std::vector<StWriteTensor>& tensors,
                                         const StWriteOptions& options = {});
/// Writes one file atomically (temporary file + rename).
Status WriteSafetensorsFile(const std::filesystem::path& path,
                            const std::vector<StWriteTensor>& tensors,
                            const StWriteOptions& options = {});

/// Writes a model's weights into `dir`: model.safetensors when max_shard_bytes <= 0 or all fits in
/// one file, else model-0000K-of-0000N.safetensors shards + model.safetensors.index.json. Shards
/// are filled in name order; a shard's whole file (header included) stays within
/// max_shard_bytes unless a single tensor is larger. Removes stale model.safetensors,
/// model-*-of-*.safetensors and index files first. Returns the safetensors files written.
Result<std::vector<std::filesystem::path>> WriteSafetensorsModel(
    const std::filesystem::path& dir, const std::vector<StWriteTensor>& tensors,
    int64_t max_shard_bytes = 0, const StWriteOptions& options = {});

/// "model-00002-of-00005.safetensors".
std::string ShardFileName(int index_1based, int count);

}  // namespace nw
