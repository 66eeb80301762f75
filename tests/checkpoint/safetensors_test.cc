#include "engine/checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"

namespace nw {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing_util::DataPath;
using testing_util::ReadAll;
using testing_util::TempDir;
using testing_util::WriteAll;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string U64Le(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out;
}

// A file image: length prefix (the header's size unless `n` is given), header text, buffer.
std::string Image(const std::string& header, const std::string& buffer = "",
                  std::optional<uint64_t> n = std::nullopt) {
  return U64Le(n.value_or(header.size())) + header + buffer;
}

std::string F32s(std::initializer_list<float> xs) {
  std::string out;
  for (float x : xs) out.append(reinterpret_cast<const char*>(&x), 4);
  return out;
}

StWriteTensor MakeTensor(std::string name, StDtype dtype, std::vector<int64_t> shape,
                         uint8_t fill_start) {
  StWriteTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(*StTensorBytes(t.dtype, t.shape));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(fill_start + i);
  return t;
}

std::vector<StWriteTensor> SampleTensors() {
  std::vector<StWriteTensor> v;
  v.push_back(MakeTensor("b.bf16", StDtype::kBF16, {3, 5}, 1));
  v.push_back(MakeTensor("a.f32", StDtype::kF32, {2, 3}, 7));
  v.push_back(MakeTensor("c.i64", StDtype::kI64, {4}, 9));
  v.push_back(MakeTensor("d.u8", StDtype::kU8, {3}, 11));
  v.push_back(MakeTensor("e.f4", StDtype::kF4, {2, 3}, 13));  // 12 nibbles = 6 bytes
  v.push_back(MakeTensor("f.empty", StDtype::kF32, {0, 7}, 0));
  v.push_back(MakeTensor("g.scalar", StDtype::kF64, {}, 17));
  v.push_back(MakeTensor("h.e8m0", StDtype::kF8E8M0, {2, 2}, 19));
  return v;
}

void ExpectSameTensors(const SafetensorsArchive& a, const std::vector<StWriteTensor>& want) {
  ASSERT_EQ(a.size(), want.size());
  for (const StWriteTensor& w : want) {
    const StTensor* t = a.Find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
    ASSERT_EQ(t->bytes.size(), w.data.size()) << w.name;
    // Not memcmp: an empty tensor's data() may be null, which memcmp may not be given even for
    // zero bytes (UBSan's nonnull-attribute check).
    EXPECT_TRUE(std::equal(t->bytes.begin(), t->bytes.end(), w.data.begin(), w.data.end()))
        << w.name;
  }
}

TEST(StDtypeTest, NamesAndBits) {
  struct Want {
    const char* name;
    int bits;
  };
  const Want all[] = {{"BOOL", 8},    {"F4", 4},          {"F6_E2M3", 6},     {"F6_E3M2", 6},
                      {"U8", 8},      {"I8", 8},          {"F8_E5M2", 8},     {"F8_E4M3", 8},
                      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
                      {"U16", 16},    {"F16", 16},        {"BF16", 16},       {"I32", 32},
                      {"U32", 32},    {"F32", 32},        {"C64", 64},        {"F64", 64},
                      {"I64", 64},    {"U64", 64}};
  for (const Want& w : all) {
    std::optional<StDtype> d = ParseStDtype(w.name);
    ASSERT_TRUE(d.has_value()) << w.name;
    EXPECT_EQ(StDtypeName(*d), w.name);
    EXPECT_EQ(StDtypeBits(*d), w.bits) << w.name;
  }
  EXPECT_FALSE(ParseStDtype("F12").has_value());
  EXPECT_FALSE(ParseStDtype("bf16").has_value());  // case-sensitive
  EXPECT_EQ(StDtypeAlignment(StDtype::kF4), 1);
  EXPECT_EQ(StDtypeAlignment(StDtype::kI64), 8);
}

TEST(StDtypeTest, TensorBytes) {
  EXPECT_EQ(*StTensorBytes(StDtype::kF32, {2, 3}), 24u);
  EXPECT_EQ(*StTensorBytes(StDtype::kF4, {2, 3}), 3u);
  EXPECT_EQ(*StTensorBytes(StDtype::kF6E2M3, {4}), 3u);
  EXPECT_EQ(*StTensorBytes(StDtype::kBF16, {}), 2u);
  EXPECT_EQ(*StTensorBytes(StDtype::kBF16, {0, 5}), 0u);
  EXPECT_THAT(StTensorBytes(StDtype::kF4, {3}).status().message(),
              HasSubstr("not a whole number of bytes"));
  EXPECT_THAT(StTensorBytes(StDtype::kU8, {1ll << 32, 1ll << 32}).status().message(),
              HasSubstr("overflows"));
  EXPECT_THAT(StTensorBytes(StDtype::kF64, {1ll << 31, 1ll << 31}).status().message(),
              HasSubstr("overflows 64-bit byte count"));
  EXPECT_FALSE(StTensorBytes(StDtype::kU8, {-1}).ok());
}

TEST(SafetensorsTest, RoundTripInMemoryAndOnDisk) {
  const std::vector<StWriteTensor> tensors = SampleTensors();
  Result<std::string> image = SerializeSafetensors(tensors);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  Result<StHeader> h = ParseSafetensors(Bytes(*image), "mem");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(h->data_start % 8, 0u);
  ASSERT_EQ(h->entries.size(), tensors.size());

  TempDir dir("st_roundtrip");
  ASSERT_TRUE(WriteSafetensorsFile(dir / "x.safetensors", tensors).ok());
  EXPECT_EQ(ReadAll(dir / "x.safetensors"), *image);  // the file and the image agree
  Result<SafetensorsArchive> a = SafetensorsArchive::Open(dir / "x.safetensors");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectSameTensors(*a, tensors);
  EXPECT_EQ(a->files().size(), 1u);
  Result<StTensor> missing = a->Get("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("x.safetensors: no tensor 'nope'"));
}

TEST(SafetensorsTest, WriterOrderAndPadding) {
  Result<std::string> image = SerializeSafetensors(SampleTensors());
  ASSERT_TRUE(image.ok());
  uint64_t n = 0;
  std::memcpy(&n, image->data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = image->substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // only spaces after the object
  Result<StHeader> h = ParseSafetensors(Bytes(*image), "mem");
  ASSERT_TRUE(h.ok());
  // Data order: descending alignment (F64/I64, F32, BF16, bytes), then name.
  std::vector<const StEntry*> by_offset;
  for (const StEntry& e : h->entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const StEntry* a, const StEntry* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->size < b->size;
  });
  std::vector<std::string> order;
  for (const StEntry* e : by_offset) order.push_back(e->name);
  EXPECT_EQ(order, (std::vector<std::string>{"c.i64", "g.scalar", "a.f32", "f.empty", "b.bf16",
                                             "d.u8", "e.f4", "h.e8m0"}));
  // Every tensor naturally aligned in the file.
  for (const StEntry& e : h->entries) {
    EXPECT_EQ(e.offset % static_cast<uint64_t>(StDtypeAlignment(e.dtype)), 0u) << e.name;
  }
  StWriteOptions no_meta;
  no_meta.pt_metadata = false;
  Result<std::string> bare = SerializeSafetensors(SampleTensors(), no_meta);
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(ParseSafetensors(Bytes(*bare), "mem")->metadata.empty());
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  std::vector<StWriteTensor> v = SampleTensors();
  v.push_back(v[0]);
  EXPECT_THAT(SerializeSafetensors(v).status().message(), HasSubstr("duplicate tensor 'b.bf16'"));
  v = SampleTensors();
  v[1].data.pop_back();
  EXPECT_THAT(SerializeSafetensors(v).status().message(), HasSubstr("'a.f32'"));
  v = SampleTensors();
  v[0].name = "__metadata__";
  EXPECT_FALSE(SerializeSafetensors(v).ok());
}

TEST(SafetensorsTest, EmptyAndWhitespace) {
  EXPECT_TRUE(ParseSafetensors(Bytes(Image("{}")), "mem").ok());
  EXPECT_TRUE(ParseSafetensors(Bytes(Image("  {}    ")), "mem").ok());
  std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_TRUE(ParseSafetensors(Bytes(Image(h, F32s({1}))), "mem").ok());
}

struct CorruptCase {
  const char* name;
  std::string image;
  const char* message;
};

std::vector<CorruptCase> CorruptCases() {
  const std::string one = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string valid = Image(one, F32s({1, 2}));
  return {
      {"too_short", "\x05\x00\x00", "too short for the 8-byte header length"},
      {"header_too_large", Image("{}", "", 100'000'001), "exceeds the limit of 100000000 bytes"},
      {"bad_header_length", Image(one, F32s({1, 2}), 4096), "exceeds the file size"},
      {"non_object_json", Image("[1,2,3]"), "header is not a JSON object"},
      {"string_json", Image("\"abc\""), "header is not a JSON object"},
      {"invalid_json", Image("{\"a\": "), "invalid JSON"},
      {"bad_utf8", Image("{\"\xff\":1}"), "invalid JSON"},
      {"entry_not_object", Image(R"({"a":[1]})"), "tensor 'a': entry is not a JSON object"},
      {"missing_field", Image(R"({"a":{"dtype":"F32","data_offsets":[0,0]}})"),
       "tensor 'a': missing field 'shape'"},
      {"extra_field",
       Image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"strides":[1]}})"),
       "tensor 'a': unexpected field 'strides'"},
      {"unknown_dtype",
       Image(R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", F32s({1, 2})),
       "tensor 'a': unknown dtype 'F12'"},
      {"negative_dim", Image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})"),
       "tensor 'a': shape entry -1 is not a non-negative 64-bit integer"},
      {"float_dim", Image(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]}})"),
       "tensor 'a': shape entry 1.5"},
      {"offsets_not_pair", Image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0]}})"),
       "tensor 'a': data_offsets is not a [begin, end] pair"},
      {"negative_offset", Image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[-4,0]}})"),
       "are not non-negative integers"},
      {"begin_after_end",
       Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", F32s({1, 2})),
       "tensor 'a': data_offsets [8,4] has begin > end"},
      {"offsets_out_of_bounds",
       Image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", F32s({1, 2})),
       "tensor 'a': data_offsets [0,16] out of bounds of the 8-byte data buffer"},
      {"huge_offsets",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})"),
       "has begin > end"},
      {"dtype_shape_mismatch",
       Image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", F32s({1, 2})),
       "tensor 'a': dtype F32 x shape [3] is 12 bytes but data_offsets [0,8] span 8"},
      {"sub_byte", Image(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "ab"),
       "tensor 'a': 3 elements of F4 are not a whole number of bytes"},
      {"overflowing_shape",
       Image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})"),
       "tensor 'a': shape [4294967296,4294967296,16] overflows 64-bit element count"},
      {"overflowing_bytes",
       Image(R"({"a":{"dtype":"F64","shape":[2147483648,2147483648],"data_offsets":[0,0]}})"),
       "overflows 64-bit byte count"},
      {"overlapping",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             F32s({1, 2, 3})),
       "tensor 'b' overlaps tensor 'a'"},
      {"zero_size_inside",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
             F32s({1, 2})),
       "tensor 'z' overlaps tensor 'a'"},
      {"gap",
       Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
             F32s({1, 2, 3})),
       "gap of 4 unused bytes before tensor 'b'"},
      {"gap_at_start",
       Image(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", F32s({1, 2})),
       "gap of 4 unused bytes before tensor 'b'"},
      {"trailing_bytes", valid + "xyz", "3 bytes after the last tensor"},
      {"truncated", valid.substr(0, valid.size() - 1),
       "tensor 'a': data_offsets [0,8] out of bounds of the 7-byte data buffer (truncated file?)"},
      {"duplicate_key",
       Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             F32s({1, 2})),
       "duplicate key 'a'"},
      {"duplicate_field",
       Image(R"({"a":{"dtype":"F32","dtype":"F32","shape":[0],"data_offsets":[0,0]}})"),
       "duplicate key 'dtype'"},
      {"deeply_nested_entry",
       Image("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
       "tensor 'a': entry is not a JSON object"},
      {"deeply_nested_shape",
       Image(R"({"a":{"dtype":"F32","data_offsets":[0,0],"shape":[)" + std::string(100000, '[') +
             std::string(100000, ']') + "]}}"),
       "tensor 'a': shape entry [...] is not a non-negative 64-bit integer"},
      {"metadata_not_object", Image(R"({"__metadata__":"pt"})"), "__metadata__ is not an object"},
      {"metadata_not_string", Image(R"({"__metadata__":{"format":1}})"),
       "__metadata__ value for 'format' is not a string"},
  };
}

TEST(SafetensorsTest, CorruptImagesAreRejectedWithSpecificMessages) {
  for (const CorruptCase& c : CorruptCases()) {
    Result<StHeader> r = ParseSafetensors(Bytes(c.image), std::string("mem:") + c.name);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(std::string("mem:") + c.name)) << c.name;
  }
}

TEST(SafetensorsTest, CorruptFilesOnDiskAreRejected) {
  TempDir dir("st_corrupt");
  for (const CorruptCase& c : CorruptCases()) {
    const std::filesystem::path p = dir / (std::string(c.name) + ".safetensors");
    WriteAll(p, c.image);
    Result<SafetensorsArchive> r = SafetensorsArchive::OpenFile(p);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(p.string())) << c.name;
  }
  WriteAll(dir / "empty.safetensors", "");
  EXPECT_THAT(SafetensorsArchive::OpenFile(dir / "empty.safetensors").status().message(),
              HasSubstr("too short"));
  EXPECT_EQ(SafetensorsArchive::OpenFile(dir / "absent.safetensors").status().code(),
            StatusCode::kNotFound);
}

// The committed files under tests/data/safetensors (written by make_files.py, not by our writer).
TEST(SafetensorsTest, CommittedHandcraftedFiles) {
  const std::pair<const char*, const char*> cases[] = {
      {"bad_header_length", "header length 4096 exceeds the file size 72"},
      {"header_too_large", "header length 100000001 exceeds the limit"},
      {"offsets_out_of_bounds", "tensor 'a': data_offsets [0,16] out of bounds"},
      {"overlapping", "tensor 'b' overlaps tensor 'a'"},
      {"gap", "gap of 4 unused bytes before tensor 'b'"},
      {"dtype_shape_mismatch", "tensor 'a': dtype F32 x shape [3] is 12 bytes"},
      {"unknown_dtype", "tensor 'a': unknown dtype 'F12'"},
      {"duplicate_key", "duplicate key 'a'"},
      {"truncated", "tensor 'c': data_offsets [16,20] out of bounds of the 17-byte data buffer"},
      {"non_object_json", "header is not a JSON object"},
      {"overflowing_shape", "tensor 'a': shape [4294967296,4294967296,16] overflows"},
  };
  for (const auto& [name, message] : cases) {
    const auto path = DataPath(std::string("safetensors/") + name + ".safetensors");
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    Result<SafetensorsArchive> r = SafetensorsArchive::OpenFile(path);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_THAT(r.status().message(), HasSubstr(message)) << name;
    EXPECT_THAT(r.status().message(), HasSubstr(std::string(name) + ".safetensors")) << name;
  }
  Result<SafetensorsArchive> valid =
      SafetensorsArchive::OpenFile(DataPath("safetensors/valid.safetensors"));
  ASSERT_TRUE(valid.ok()) << valid.status().ToString();
  ASSERT_EQ(valid->size(), 3u);
  const StTensor* a = valid->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDtype::kF32);
  float av[2];
  std::memcpy(av, a->bytes.data(), 8);
  EXPECT_EQ(av[0], 1.5f);
  EXPECT_EQ(av[1], -2.0f);
  const StTensor* b = valid->Find("b");
  int64_t bv;
  std::memcpy(&bv, b->bytes.data(), 8);
  EXPECT_EQ(bv, -7);
  EXPECT_EQ(valid->Find("c")->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(valid->metadata().at("valid.safetensors").at("format"), "pt");
}

std::vector<StWriteTensor> ManyTensors() {
  std::vector<StWriteTensor> v;
  for (int i = 0; i < 20; ++i) {
    v.push_back(MakeTensor("layer." + std::to_string(i) + ".w", StDtype::kBF16, {64, 32},
                           static_cast<uint8_t>(i)));
    v.push_back(MakeTensor("layer." + std::to_string(i) + ".b", StDtype::kF32, {7},
                           static_cast<uint8_t>(3 * i)));
  }
  v.push_back(MakeTensor("big", StDtype::kU8, {20000}, 5));  // larger than a shard
  return v;
}

TEST(SafetensorsTest, ShardedWriteAndRead) {
  const std::vector<StWriteTensor> tensors = ManyTensors();
  TempDir dir("st_sharded");
  const int64_t limit = 10000;
  Result<std::vector<std::filesystem::path>> files =
      WriteSafetensorsModel(dir.path(), tensors, limit);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_GT(files->size(), 2u);
  for (size_t k = 0; k < files->size(); ++k) {
    EXPECT_EQ((*files)[k].filename().string(),
              ShardFileName(static_cast<int>(k + 1), static_cast<int>(files->size())));
    const auto size = std::filesystem::file_size((*files)[k]);
    Result<SafetensorsArchive> one = SafetensorsArchive::OpenFile((*files)[k]);
    ASSERT_TRUE(one.ok());
    if (!one->Contains("big")) {
      EXPECT_LE(size, static_cast<uintmax_t>(limit)) << (*files)[k];
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  Result<SafetensorsArchive> a = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectSameTensors(*a, tensors);
  EXPECT_EQ(a->files().size(), files->size());
  json index = json::parse(ReadAll(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), a->total_bytes());

  // Unsharded into the same folder: stale shards and index are removed.
  Result<std::vector<std::filesystem::path>> single = WriteSafetensorsModel(dir.path(), tensors);
  ASSERT_TRUE(single.ok());
  ASSERT_EQ(single->size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / ShardFileName(1, static_cast<int>(files->size()))));
  Result<SafetensorsArchive> b = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectSameTensors(*b, tensors);
}

TEST(SafetensorsTest, SmallModelStaysOneFileEvenWithALimit) {
  TempDir dir("st_one");
  Result<std::vector<std::filesystem::path>> files =
      WriteSafetensorsModel(dir.path(), SampleTensors(), 1 << 20);
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].filename(), "model.safetensors");
}

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteSafetensorsModel(dir_.path(), ManyTensors(), 10000).ok());
    index_ = json::parse(ReadAll(dir_ / "model.safetensors.index.json"));
  }
  std::string OpenWith(const json& index) {
    WriteAll(dir_ / "model.safetensors.index.json", index.dump());
    Result<SafetensorsArchive> a = SafetensorsArchive::Open(dir_.path());
    return a.ok() ? std::string() : a.status().message();
  }
  TempDir dir_{"st_index"};
  json index_;
};

TEST_F(IndexTest, ValidIndexOpens) { EXPECT_EQ(OpenWith(index_), ""); }

TEST_F(IndexTest, MissingShardFile) {
  json j = index_;
  j["weight_map"]["layer.0.w"] = "model-00009-of-00009.safetensors";
  EXPECT_THAT(OpenWith(j), HasSubstr("shard 'model-00009-of-00009.safetensors' (holding tensor "
                                     "'layer.0.w') does not exist"));
}

TEST_F(IndexTest, MappedTensorNotInShard) {
  json j = index_;
  j["weight_map"]["ghost"] = j["weight_map"]["layer.0.w"];
  EXPECT_THAT(OpenWith(j), HasSubstr("tensor 'ghost' is mapped to"));
  EXPECT_THAT(OpenWith(j), HasSubstr("but that shard does not hold it"));
}

TEST_F(IndexTest, TensorMappedToTheWrongShard) {
  json j = index_;
  const std::string first = j["weight_map"]["layer.0.w"];
  const std::string other = j["weight_map"]["big"];
  ASSERT_NE(first, other);
  j["weight_map"]["layer.0.w"] = other;
  EXPECT_THAT(OpenWith(j), HasSubstr("tensor 'layer.0.w' is mapped to '" + other +
                                     "' but is stored in '" + first + "'"));
}

TEST_F(IndexTest, ShardTensorMissingFromMap) {
  json j = index_;
  j["weight_map"].erase("layer.3.b");
  j["metadata"]["total_size"] = j["metadata"]["total_size"].get<uint64_t>() - 28;
  EXPECT_THAT(OpenWith(j), HasSubstr("tensor 'layer.3.b' in shard"));
  EXPECT_THAT(OpenWith(j), HasSubstr("is missing from the weight_map"));
}

TEST_F(IndexTest, WrongTotalSize) {
  json j = index_;
  j["metadata"]["total_size"] = 12345;
  EXPECT_THAT(OpenWith(j), HasSubstr("metadata.total_size 12345 !="));
  j["metadata"].erase("total_size");
  EXPECT_THAT(OpenWith(j), HasSubstr("missing metadata.total_size"));
}

TEST_F(IndexTest, HostileFileNames) {
  json j = index_;
  j["weight_map"]["layer.0.w"] = "../model-00001-of-00003.safetensors";
  EXPECT_THAT(OpenWith(j), HasSubstr("which is not a plain file name"));
  j = index_;
  j["weight_map"]["layer.0.w"] = 7;
  EXPECT_THAT(OpenWith(j), HasSubstr("weight_map entry for tensor 'layer.0.w' is not a file name"));
  j = index_;
  j["extra"] = 1;
  EXPECT_THAT(OpenWith(j), HasSubstr("unexpected key 'extra'"));
  WriteAll(dir_ / "model.safetensors.index.json", R"({"metadata":{"total_size":0},"metadata":{}})");
  EXPECT_THAT(SafetensorsArchive::Open(dir_.path()).status().message(),
              HasSubstr("duplicate key 'metadata'"));
}

TEST_F(IndexTest, BothLayoutsPresentIsAnError) {
  ASSERT_TRUE(WriteSafetensorsFile(dir_ / "model.safetensors", SampleTensors()).ok());
  Result<SafetensorsArchive> a = SafetensorsArchive::Open(dir_.path());
  EXPECT_EQ(a.status().code(), StatusCode::kFailedPrecondition);
  // Opening the index path explicitly still works.
  EXPECT_TRUE(SafetensorsArchive::Open(dir_ / "model.safetensors.index.json").ok());
}

TEST(SafetensorsTest, FolderWithoutWeights) {
  TempDir dir("st_none");
  Result<SafetensorsArchive> a = SafetensorsArchive::Open(dir.path());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace nw
