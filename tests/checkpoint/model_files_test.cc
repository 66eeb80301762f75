#include "engine/checkpoint/model_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "common/sha256.h"
#include "engine/checkpoint/random_checkpoint.h"

namespace nw {
namespace {

using ::testing::HasSubstr;
using testing_util::ConfigPath;
using testing_util::ReadAll;
using testing_util::TempDir;
using testing_util::WriteAll;

ModelConfig TinyA() { return *LoadModelConfig(ConfigPath("tiny-a.json")); }

void MakeModel(const std::filesystem::path& dir, int64_t max_shard_bytes = 0) {
  ASSERT_TRUE(
      WriteRandomCheckpoint(TinyA(), 5, CheckpointLayout::kBf16, dir, max_shard_bytes).ok());
  WriteAll(dir / "tokenizer.json", R"({"model": {"type": "BPE"}})");
}

std::string Digest(const std::filesystem::path& dir) {
  Result<ModelFiles> m = LocateModel(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? m->digest : std::string();
}

TEST(ModelFilesTest, SingleFileModel) {
  TempDir dir("mf_single");
  MakeModel(dir.path());
  Result<ModelFiles> m = LocateModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->dir, dir.path());
  EXPECT_EQ(m->config, dir / "config.json");
  EXPECT_EQ(m->tokenizer, dir / "tokenizer.json");
  ASSERT_EQ(m->weights.size(), 1u);
  EXPECT_EQ(m->weights[0], dir / "model.safetensors");
  const std::string manifest =
      "config:" + *Sha256File(dir / "config.json") +
      "\ntokenizer:" + *Sha256File(dir / "tokenizer.json") +
      "\nweights:model.safetensors:" + *Sha256File(dir / "model.safetensors") + "\n";
  EXPECT_EQ(m->digest, Sha256Hex(manifest));
  EXPECT_EQ(m->digest.size(), 64u);
}

TEST(ModelFilesTest, ShardedModelDigestCoversEveryShard) {
  TempDir dir("mf_sharded");
  MakeModel(dir.path(), 1 << 20);
  Result<ModelFiles> m = LocateModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_GE(m->weights.size(), 3u);
  std::string manifest = "config:" + *Sha256File(dir / "config.json") +
                         "\ntokenizer:" + *Sha256File(dir / "tokenizer.json") + "\n";
  for (size_t k = 0; k < m->weights.size(); ++k) {
    const std::string name =
        ShardFileName(static_cast<int>(k + 1), static_cast<int>(m->weights.size()));
    EXPECT_EQ(m->weights[k], dir / name);  // sorted by name
    manifest += "weights:" + name + ":" + *Sha256File(dir / name) + "\n";
  }
  EXPECT_EQ(m->digest, Sha256Hex(manifest));

  // Changing one byte of the last shard changes the digest.
  const std::string before = m->digest;
  std::string bytes = ReadAll(m->weights.back());
  bytes[bytes.size() - 1] = static_cast<char>(bytes.back() ^ 1);
  WriteAll(m->weights.back(), bytes);
  EXPECT_NE(Digest(dir.path()), before);
}

TEST(ModelFilesTest, DigestChangesWhenAnyFileChanges) {
  TempDir dir("mf_change");
  MakeModel(dir.path());
  const std::string d0 = Digest(dir.path());
  EXPECT_EQ(Digest(dir.path()), d0);  // stable

  WriteAll(dir / "tokenizer.json", R"({"model": {"type": "BPE", "x": 1}})");
  const std::string d1 = Digest(dir.path());
  EXPECT_NE(d1, d0);

  std::string config = ReadAll(dir / "config.json");
  WriteAll(dir / "config.json", config + "\n");
  const std::string d2 = Digest(dir.path());
  EXPECT_NE(d2, d1);

  ASSERT_TRUE(WriteRandomCheckpoint(TinyA(), 6, CheckpointLayout::kBf16, dir.path()).ok());
  WriteAll(dir / "config.json", config + "\n");  // same config bytes as for d2
  EXPECT_NE(Digest(dir.path()), d2);             // only the weights differ

  // Files other than the model's do not matter.
  const std::string d3 = Digest(dir.path());
  WriteAll(dir / "README.md", "hello");
  EXPECT_EQ(Digest(dir.path()), d3);
}

TEST(ModelFilesTest, MissingFiles) {
  TempDir dir("mf_missing");
  EXPECT_EQ(LocateModel(dir / "absent").status().code(), StatusCode::kNotFound);
  MakeModel(dir.path());
  std::filesystem::remove(dir / "tokenizer.json");
  Result<ModelFiles> no_tok = LocateModel(dir.path());
  EXPECT_EQ(no_tok.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(no_tok.status().message(), HasSubstr("tokenizer.json"));

  WriteAll(dir / "tokenizer.json", "{}");
  std::filesystem::remove(dir / "config.json");
  EXPECT_THAT(LocateModel(dir.path()).status().message(), HasSubstr("config.json"));

  MakeModel(dir.path());
  std::filesystem::remove(dir / "model.safetensors");
  Result<ModelFiles> no_weights = LocateModel(dir.path());
  EXPECT_EQ(no_weights.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(no_weights.status().message(), HasSubstr("model.safetensors"));
}

TEST(ModelFilesTest, ShardProblems) {
  TempDir dir("mf_shards");
  MakeModel(dir.path(), 1 << 20);
  Result<ModelFiles> located = LocateModel(dir.path());
  ASSERT_TRUE(located.ok());
  ASSERT_GE(located->weights.size(), 2u);
  const auto shard2 = located->weights[1];
  const std::string saved = ReadAll(shard2);
  std::filesystem::remove(shard2);
  Result<ModelFiles> m = LocateModel(dir.path());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr(shard2.filename().string()));
  WriteAll(shard2, saved);
  EXPECT_TRUE(LocateModel(dir.path()).ok());

  // Both layouts at once are ambiguous.
  WriteAll(dir / "model.safetensors", saved);
  EXPECT_EQ(LocateModel(dir.path()).status().code(), StatusCode::kFailedPrecondition);
  std::filesystem::remove(dir / "model.safetensors");

  // A hostile index.
  const std::string index = ReadAll(dir / "model.safetensors.index.json");
  WriteAll(dir / "model.safetensors.index.json",
           R"({"metadata":{"total_size":0},"weight_map":{"a":"../../etc/passwd"}})");
  EXPECT_THAT(LocateModel(dir.path()).status().message(), HasSubstr("not a plain file name"));
  WriteAll(dir / "model.safetensors.index.json", "{not json");
  EXPECT_THAT(LocateModel(dir.path()).status().message(), HasSubstr("invalid JSON"));
  WriteAll(dir / "model.safetensors.index.json", index);
  EXPECT_TRUE(LocateModel(dir.path()).ok());
}

}  // namespace
}  // namespace nw
