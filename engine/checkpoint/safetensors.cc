#include "engine/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "engine/checkpoint/json_util.h"

namespace nw {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  int bits;
};

constexpr std::array<DtypeInfo, 22> kDtypes = {{
    {StDtype::kBool, "BOOL", 8},
    {StDtype::kF4, "F4", 4},
    {StDtype::kF6E2M3, "F6_E2M3", 6},
    {StDtype::kF6E3M2, "F6_E3M2", 6},
    {StDtype::kU8, "U8", 8},
    {StDtype::kI8, "I8", 8},
    {StDtype::kF8E5M2, "F8_E5M2", 8},
    {StDtype::kF8E4M3, "F8_E4M3", 8},
    {StDtype::kF8E8M0, "F8_E8M0", 8},
    {StDtype::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {StDtype::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    {StDtype::kI16, "I16", 16},
    {StDtype::kU16, "U16", 16},
    {StDtype::kF16, "F16", 16},
    {StDtype::kBF16, "BF16", 16},
    {StDtype::kI32, "I32", 32},
    {StDtype::kU32, "U32", 32},
    {StDtype::kF32, "F32", 32},
    {StDtype::kC64, "C64", 64},
    {StDtype::kF64, "F64", 64},
    {StDtype::kI64, "I64", 64},
    {StDtype::kU64, "U64", 64},
}};

const DtypeInfo& Info(StDtype d) {
  for (const DtypeInfo& i : kDtypes) {
    if (i.dtype == d) return i;
  }
  return kDtypes[4];  // unreachable: every enumerator is in the table
}

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// A JSON value as a non-negative 64-bit integer.
std::optional<uint64_t> AsU64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

Status ParseEntry(const std::string& source, const std::string& name, const json& v,
                  uint64_t buffer_size, uint64_t data_start, StEntry* out) {
  const std::string where = source + ": tensor " + Quoted(name);
  if (!v.is_object()) return Status::Corruption(where + ": entry is not a JSON object");
  for (const auto& [key, value] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Status::Corruption(where + ": unexpected field " + Quoted(key));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) return Status::Corruption(where + ": missing field '" + key + "'");
  }
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) return Status::Corruption(where + ": dtype is not a string");
  std::optional<StDtype> d = ParseStDtype(dtype.get_ref<const std::string&>());
  if (!d) {
    return Status::Corruption(where + ": unknown dtype " +
                              Quoted(dtype.get_ref<const std::string&>()));
  }
  const json& shape = v["shape"];
  if (!shape.is_array()) return Status::Corruption(where + ": shape is not a list");
  std::vector<int64_t> dims;
  for (const json& e : shape) {
    std::optional<uint64_t> u = AsU64(e);
    if (!u || *u > static_cast<uint64_t>(INT64_MAX)) {
      return Status::Corruption(where + ": shape entry " + JsonSnippet(e) +
                                " is not a non-negative 64-bit integer");
    }
    dims.push_back(static_cast<int64_t>(*u));
  }
  const json& offs = v["data_offsets"];
  if (!offs.is_array() || offs.size() != 2) {
    return Status::Corruption(where + ": data_offsets is not a [begin, end] pair");
  }
  std::optional<uint64_t> begin = AsU64(offs[0]);
  std::optional<uint64_t> end = AsU64(offs[1]);
  if (!begin || !end) {
    return Status::Corruption(where + ": data_offsets " + JsonSnippet(offs) +
                              " are not non-negative integers");
  }
  if (*begin > *end) {
    return Status::Corruption(where + ": data_offsets " + JsonSnippet(offs) + " has begin > end");
  }
  if (*end > buffer_size) {
    return Status::Corruption(where + ": data_offsets " + JsonSnippet(offs) +
                              " out of bounds of the " + std::to_string(buffer_size) +
                              "-byte data buffer (truncated file?)");
  }
  Result<uint64_t> bytes = StTensorBytes(*d, dims);
  if (!bytes.ok()) return Status::Corruption(where + ": " + bytes.status().message());
  if (*bytes != *end - *begin) {
    return Status::Corruption(where + ": dtype " + std::string(StDtypeName(*d)) + " x shape " +
                              ShapeToString(dims) + " is " + std::to_string(*bytes) +
                              " bytes but data_offsets " + JsonSnippet(offs) + " span " +
                              std::to_string(*end - *begin));
  }
  out->name = name;
  out->dtype = *d;
  out->shape = std::move(dims);
  out->offset = data_start + *begin;
  out->size = *end - *begin;
  return Status::Ok();
}

bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

bool IsShardName(const std::string& s) {
  // model-DDDDD-of-DDDDD.safetensors
  static constexpr std::string_view kPattern = "model-#####-of-#####.safetensors";
  if (s.size() != kPattern.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (kPattern[i] == '#' ? (s[i] < '0' || s[i] > '9') : s[i] != kPattern[i]) return false;
  }
  return true;
}

// Tensors in writer order: descending dtype alignment, then name.
std::vector<const StWriteTensor*> WriterOrder(const std::vector<const StWriteTensor*>& tensors) {
  std::vector<const StWriteTensor*> sorted = tensors;
  std::sort(sorted.begin(), sorted.end(), [](const StWriteTensor* a, const StWriteTensor* b) {
    int aa = StDtypeAlignment(a->dtype), ab = StDtypeAlignment(b->dtype);
    if (aa != ab) return aa > ab;
    return a->name < b->name;
  });
  return sorted;
}

Status CheckWriteTensors(const std::vector<const StWriteTensor*>& tensors) {
  std::set<std::string> names;
  for (const StWriteTensor* t : tensors) {
    if (t->name.empty()) return Status::InvalidArgument("safetensors writer: empty tensor name");
    if (t->name == "__metadata__") {
      return Status::InvalidArgument("safetensors writer: '__metadata__' is reserved");
    }
    if (!names.insert(t->name).second) {
      return Status::InvalidArgument("safetensors writer: duplicate tensor " + Quoted(t->name));
    }
    Result<uint64_t> bytes = StTensorBytes(t->dtype, t->shape);
    if (!bytes.ok()) {
      return Status::InvalidArgument("safetensors writer: tensor " + Quoted(t->name) + ": " +
                                     bytes.status().message());
    }
    if (*bytes != t->data.size()) {
      return Status::InvalidArgument("safetensors writer: tensor " + Quoted(t->name) + ": " +
                                     std::string(StDtypeName(t->dtype)) + " x " +
                                     ShapeToString(t->shape) + " needs " + std::to_string(*bytes) +
                                     " bytes, got " + std::to_string(t->data.size()));
    }
  }
  return Status::Ok();
}

// The padded JSON header for tensors already in writer order.
std::string BuildHeader(const std::vector<const StWriteTensor*>& sorted,
                        const StWriteOptions& options) {
  json h = json::object();
  if (options.pt_metadata) h["__metadata__"] = json{{"format", "pt"}};
  uint64_t offset = 0;
  for (const StWriteTensor* t : sorted) {
    uint64_t end = offset + t->data.size();
    h[t->name] = json{{"dtype", StDtypeName(t->dtype)},
                      {"shape", t->shape},
                      {"data_offsets", json::array({offset, end})}};
    offset = end;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::string LengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

Status WriteSorted(const std::filesystem::path& path,
                   const std::vector<const StWriteTensor*>& tensors,
                   const StWriteOptions& options) {
  NW_RETURN_IF_ERROR(CheckWriteTensors(tensors));
  std::vector<const StWriteTensor*> sorted = WriterOrder(tensors);
  std::string header = BuildHeader(sorted, options);
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    FilePtr f(std::fopen(tmp.c_str(), "wb"));
    if (!f) return Status::IoError(tmp.string() + ": cannot create: " + std::strerror(errno));
    auto put = [&](const void* p, size_t n) {
      return n == 0 || std::fwrite(p, 1, n, f.get()) == n;
    };
    std::string prefix = LengthPrefix(header.size());
    bool ok = put(prefix.data(), prefix.size()) && put(header.data(), header.size());
    for (const StWriteTensor* t : sorted) ok = ok && put(t->data.data(), t->data.size());
    ok = ok && std::fflush(f.get()) == 0;
    if (!ok) {
      int err = errno;
      f.reset();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return Status::IoError(path.string() + ": write failed: " + std::strerror(err));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::IoError("cannot rename " + tmp.string() + " to " + path.string());
  }
  return Status::Ok();
}

// Upper bound of a tensor's share of a file: its header entry plus its data.
uint64_t FileShareBound(const StWriteTensor& t) {
  return json(t.name).dump().size() + 128 + 21 * t.shape.size() + t.data.size();
}

}  // namespace

// ---- Dtypes ----------------------------------------------------------------------------------

std::string_view StDtypeName(StDtype d) { return Info(d).name; }

std::optional<StDtype> ParseStDtype(std::string_view name) {
  for (const DtypeInfo& i : kDtypes) {
    if (name == i.name) return i.dtype;
  }
  return std::nullopt;
}

int StDtypeBits(StDtype d) { return Info(d).bits; }

int StDtypeAlignment(StDtype d) { return std::max(1, Info(d).bits / 8); }

Result<uint64_t> StTensorBytes(StDtype d, const std::vector<int64_t>& shape) {
  uint64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return Status::InvalidArgument("negative dimension in " + ShapeToString(shape));
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel)) {
      return Status::InvalidArgument("shape " + ShapeToString(shape) +
                                     " overflows 64-bit element count");
    }
  }
  uint64_t bits = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(StDtypeBits(d)), &bits)) {
    return Status::InvalidArgument("shape " + ShapeToString(shape) + " of " +
                                   std::string(StDtypeName(d)) + " overflows 64-bit byte count");
  }
  if (bits % 8 != 0) {
    return Status::InvalidArgument(std::to_string(numel) + " elements of " +
                                   std::string(StDtypeName(d)) +
                                   " are not a whole number of bytes");
  }
  return bits / 8;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- MappedFile ------------------------------------------------------------------------------

Result<MappedFile> MappedFile::Open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(path.string() + ": no such file");
    return Status::IoError(path.string() + ": cannot open: " + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IoError(path.string() + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path.string() + ": not a regular file");
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ == 0) return m;
  void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    return Status::IoError(path.string() + ": mmap failed: " + std::strerror(errno));
  }
  m.data_ = static_cast<const uint8_t*>(p);
  m.mapped_ = true;
  return m;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

// ---- Parsing ---------------------------------------------------------------------------------

Result<StHeader> ParseSafetensors(std::span<const uint8_t> file, const std::string& source) {
  if (file.size() < 8) {
    return Status::Corruption(source + ": file is " + std::to_string(file.size()) +
                              " bytes, too short for the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];
  if (n > kMaxHeaderBytes) {
    return Status::Corruption(source + ": header length " + std::to_string(n) +
                              " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
                              " bytes");
  }
  if (n > file.size() - 8) {
    return Status::Corruption(source + ": header length " + std::to_string(n) +
                              " exceeds the file size " + std::to_string(file.size()) +
                              " (truncated file?)");
  }
  std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, n);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') {
    return Status::Corruption(source + ": header is not a JSON object");
  }
  NW_ASSIGN_OR_RETURN(json h, ParseJsonStrict(text, source + ": header"));
  if (!h.is_object()) return Status::Corruption(source + ": header is not a JSON object");

  StHeader out;
  out.data_start = 8 + n;
  const uint64_t buffer_size = file.size() - 8 - n;
  for (const auto& [key, value] : h.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return Status::Corruption(source + ": __metadata__ is not an object");
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return Status::Corruption(source + ": __metadata__ value for " + Quoted(mk) +
                                    " is not a string");
        }
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    StEntry e;
    NW_RETURN_IF_ERROR(ParseEntry(source, key, value, buffer_size, out.data_start, &e));
    out.entries.push_back(std::move(e));
  }

  // The entries must tile the buffer [0, buffer_size) exactly.
  std::vector<const StEntry*> by_offset;
  for (const StEntry& e : out.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const StEntry* a, const StEntry* b) {
    if (a->offset != b->offset) return a->offset < b->offset;
    if (a->size != b->size) return a->size < b->size;
    return a->name < b->name;
  });
  uint64_t expected = out.data_start;
  const StEntry* prev = nullptr;
  for (const StEntry* e : by_offset) {
    if (e->offset > expected) {
      return Status::Corruption(source + ": gap of " + std::to_string(e->offset - expected) +
                                " unused bytes before tensor " + Quoted(e->name));
    }
    if (e->offset < expected) {
      return Status::Corruption(source + ": tensor " + Quoted(e->name) + " overlaps tensor " +
                                Quoted(prev ? prev->name : std::string("?")));
    }
    expected = e->offset + e->size;
    prev = e;
  }
  if (expected != file.size()) {
    return Status::Corruption(source + ": " + std::to_string(file.size() - expected) +
                              " bytes after the last tensor: file size " +
                              std::to_string(file.size()) + " != 8 + header " + std::to_string(n) +
                              " + tensor bytes " + std::to_string(expected - out.data_start));
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const StEntry& a, const StEntry& b) { return a.name < b.name; });
  return out;
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- Archive ---------------------------------------------------------------------------------

Status SafetensorsArchive::AddFile(const std::filesystem::path& file, StHeader* header_out) {
  NW_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(file));
  NW_ASSIGN_OR_RETURN(StHeader h, ParseSafetensors(m.bytes(), file.string()));
  const std::string fname = file.filename().string();
  std::span<const uint8_t> bytes = m.bytes();
  for (const StEntry& e : h.entries) {
    auto it = tensors_.find(e.name);
    if (it != tensors_.end()) {
      return Status::Corruption(source_ + ": tensor " + Quoted(e.name) + " is in both " +
                                it->second.file + " and " + fname);
    }
    StTensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.bytes = bytes.subspan(e.offset, e.size);
    t.file = fname;
    tensors_.emplace(e.name, std::move(t));
  }
  metadata_[fname] = h.metadata;
  files_.push_back(std::move(m));
  if (header_out) *header_out = std::move(h);
  return Status::Ok();
}

Result<SafetensorsArchive> SafetensorsArchive::Open(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const bool single = std::filesystem::exists(path / kSingleName, ec);
    const bool index = std::filesystem::exists(path / kIndexName, ec);
    if (single && index) {
      return Status::FailedPrecondition(path.string() + ": both " + kSingleName + " and " +
                                        kIndexName + " are present");
    }
    if (index) return OpenIndex(path / kIndexName);
    if (single) return OpenFile(path / kSingleName);
    return Status::NotFound(path.string() + ": no " + kSingleName + " or " + kIndexName);
  }
  const std::string name = path.filename().string();
  if (name.size() >= 11 && name.ends_with(".index.json")) return OpenIndex(path);
  return OpenFile(path);
}

Result<SafetensorsArchive> SafetensorsArchive::OpenFile(const std::filesystem::path& file) {
  SafetensorsArchive a;
  a.source_ = file.string();
  NW_RETURN_IF_ERROR(a.AddFile(file, nullptr));
  return a;
}

Result<SafetensorsArchive> SafetensorsArchive::OpenIndex(const std::filesystem::path& index) {
  const std::string src = index.string();
  NW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
  NW_ASSIGN_OR_RETURN(json j, ParseJsonStrict(text, src));
  if (!j.is_object()) return Status::Corruption(src + ": index is not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "metadata" && key != "weight_map") {
      return Status::Corruption(src + ": unexpected key " + Quoted(key));
    }
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
    return Status::Corruption(src + ": missing or non-object 'weight_map'");
  }
  if (!j.contains("metadata") || !j["metadata"].is_object()) {
    return Status::Corruption(src + ": missing or non-object 'metadata'");
  }
  const json& meta = j["metadata"];
  if (!meta.contains("total_size"))
    return Status::Corruption(src + ": missing metadata.total_size");
  std::optional<uint64_t> total_size = AsU64(meta["total_size"]);
  if (!total_size && meta["total_size"].is_number_float()) {
    double d = meta["total_size"].get<double>();
    if (d >= 0 && d < 1.8e19 && static_cast<double>(static_cast<uint64_t>(d)) == d) {
      total_size = static_cast<uint64_t>(d);
    }
  }
  if (!total_size) {
    return Status::Corruption(src + ": metadata.total_size is not a non-negative integer");
  }
  std::map<std::string, std::string> weight_map;
  std::set<std::string> shard_names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) {
      return Status::Corruption(src + ": weight_map entry for tensor " + Quoted(tensor) +
                                " is not a file name");
    }
    const std::string& f = file.get_ref<const std::string&>();
    if (!IsPlainFileName(f)) {
      return Status::Corruption(src + ": tensor " + Quoted(tensor) + " maps to " + Quoted(f) +
                                ", which is not a plain file name");
    }
    weight_map[tensor] = f;
    shard_names.insert(f);
  }

  SafetensorsArchive a;
  a.source_ = src;
  const std::filesystem::path dir = index.parent_path();
  for (const std::string& shard : shard_names) {
    std::error_code ec;
    if (!std::filesystem::exists(dir / shard, ec)) {
      std::string example;
      for (const auto& [t, f] : weight_map) {
        if (f == shard) {
          example = t;
          break;
        }
      }
      return Status::NotFound(src + ": shard " + Quoted(shard) + " (holding tensor " +
                              Quoted(example) + ") does not exist");
    }
    NW_RETURN_IF_ERROR(a.AddFile(dir / shard, nullptr));
  }
  for (const auto& [tensor, file] : weight_map) {
    const StTensor* t = a.Find(tensor);
    if (!t) {
      return Status::Corruption(src + ": tensor " + Quoted(tensor) + " is mapped to " +
                                Quoted(file) + " but that shard does not hold it");
    }
    if (t->file != file) {
      return Status::Corruption(src + ": tensor " + Quoted(tensor) + " is mapped to " +
                                Quoted(file) + " but is stored in " + Quoted(t->file));
    }
  }
  for (const auto& [name, t] : a.tensors_) {
    if (!weight_map.count(name)) {
      return Status::Corruption(src + ": tensor " + Quoted(name) + " in shard " + Quoted(t.file) +
                                " is missing from the weight_map");
    }
  }
  if (a.total_bytes() != *total_size) {
    return Status::Corruption(src + ": metadata.total_size " + std::to_string(*total_size) +
                              " != " + std::to_string(a.total_bytes()) +
                              " bytes of tensors in the shards");
  }
  return a;
}

const StTensor* SafetensorsArchive::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<StTensor> SafetensorsArchive::Get(const std::string& name) const {
  const StTensor* t = Find(name);
  if (!t) return Status::NotFound(source_ + ": no tensor " + Quoted(name));
  return *t;
}

std::vector<std::string> SafetensorsArchive::Names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

uint64_t SafetensorsArchive::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.bytes.size();
  return n;
}

std::vector<std::filesystem::path> SafetensorsArchive::files() const {
  std::vector<std::filesystem::path> out;
  for (const MappedFile& f : files_) out.push_back(f.path());
  return out;
}

// ---- Writer ----------------------------------------------------------------------------------

Result<std::string> SerializeSafetensors(const std::vector<StWriteTensor>& tensors,
                                         const StWriteOptions& options) {
  std::vector<const StWriteTensor*> ptrs;
  for (const StWriteTensor& t : tensors) ptrs.push_back(&t);
  NW_RETURN_IF_ERROR(CheckWriteTensors(ptrs));
  std::vector<const StWriteTensor*> sorted = WriterOrder(ptrs);
  std::string header = BuildHeader(sorted, options);
  std::string out = LengthPrefix(header.size()) + header;
  for (const StWriteTensor* t : sorted) {
    out.append(reinterpret_cast<const char*>(t->data.data()), t->data.size());
  }
  return out;
}

Status WriteSafetensorsFile(const std::filesystem::path& path,
                            const std::vector<StWriteTensor>& tensors,
                            const StWriteOptions& options) {
  std::vector<const StWriteTensor*> ptrs;
  for (const StWriteTensor& t : tensors) ptrs.push_back(&t);
  return WriteSorted(path, ptrs, options);
}

std::string ShardFileName(int index_1based, int count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index_1based, count);
  return buf;
}

Result<std::vector<std::filesystem::path>> WriteSafetensorsModel(
    const std::filesystem::path& dir, const std::vector<StWriteTensor>& tensors,
    int64_t max_shard_bytes, const StWriteOptions& options) {
  std::vector<const StWriteTensor*> ptrs;
  for (const StWriteTensor& t : tensors) ptrs.push_back(&t);
  NW_RETURN_IF_ERROR(CheckWriteTensors(ptrs));
  std::sort(ptrs.begin(), ptrs.end(),
            [](const StWriteTensor* a, const StWriteTensor* b) { return a->name < b->name; });

  // Fixed part of a file: length prefix, braces, __metadata__, padding.
  constexpr uint64_t kFileOverhead = 64;
  std::vector<std::vector<const StWriteTensor*>> shards(1);
  uint64_t used = kFileOverhead;
  if (max_shard_bytes > 0) {
    const auto limit = static_cast<uint64_t>(max_shard_bytes);
    for (const StWriteTensor* t : ptrs) {
      uint64_t share = FileShareBound(*t);
      if (!shards.back().empty() && used + share > limit) {
        shards.emplace_back();
        used = kFileOverhead;
      }
      shards.back().push_back(t);
      used += share;
    }
  } else {
    shards.back() = ptrs;
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(dir.string() + ": cannot create folder: " + ec.message());
  std::vector<std::filesystem::path> stale;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kSingleName || name == kIndexName || IsShardName(name)) stale.push_back(it->path());
  }
  if (ec) return Status::IoError(dir.string() + ": cannot list folder: " + ec.message());
  for (const std::filesystem::path& p : stale) {
    std::filesystem::remove(p, ec);
    if (ec) return Status::IoError(p.string() + ": cannot remove stale file: " + ec.message());
  }

  std::vector<std::filesystem::path> written;
  if (shards.size() == 1) {
    written.push_back(dir / kSingleName);
    NW_RETURN_IF_ERROR(WriteSorted(written.back(), shards[0], options));
    return written;
  }
  json weight_map = json::object();
  uint64_t total = 0;
  const int count = static_cast<int>(shards.size());
  for (int k = 0; k < count; ++k) {
    const std::string name = ShardFileName(k + 1, count);
    written.push_back(dir / name);
    NW_RETURN_IF_ERROR(WriteSorted(written.back(), shards[static_cast<size_t>(k)], options));
    for (const StWriteTensor* t : shards[static_cast<size_t>(k)]) {
      weight_map[t->name] = name;
      total += t->data.size();
    }
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  NW_RETURN_IF_ERROR(WriteFileAtomically(dir / kIndexName, index.dump(2) + "\n"));
  return written;
}

}  // namespace nw
