// The persistent pipeline cache (ContextOptions::pipeline_cache_path): one file per device in the
// directory, read at start, written atomically at the end; anything wrong with the file is a
// warning and an empty cache, never a failure.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <zlib.h>

namespace fs = std::filesystem;
using namespace relpos;

namespace {

struct Warnings {
  std::mutex mutex;
  std::vector<std::string> texts;
  std::vector<std::string> take() {
    std::lock_guard lock(mutex);
    return std::exchange(texts, {});
  }
};

ContextOptions options(const fs::path& dir, Warnings& warnings) {
  ContextOptions o;
  o.validation = true;
  o.pipeline_cache_path = dir.string();
  o.on_warning = [&warnings](const std::string& text) {
    std::lock_guard lock(warnings.mutex);
    warnings.texts.push_back(text);
  };
  return o;
}

// Runs an op (so that the context creates a pipeline) and checks its result.
void use(Context& ctx) {
  T5Params p;
  p.queries = p.keys = 8;
  Buffer out(ctx, 8 * 8 * 4);
  Recorder rec(ctx);
  t5_buckets(rec, p, out);
  rec.submit_and_wait();
  EXPECT_EQ(out.download<std::int32_t>(64), t5_buckets_reference(p));
  EXPECT_EQ(ctx.validation_message_count(), 0u);
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  return files;
}

class PipelineCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("relpos_pipeline_cache_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The file one context leaves for this device.
  fs::path written_file() {
    {
      Context ctx(options(dir_, warnings_));
      use(ctx);
    }
    EXPECT_TRUE(warnings_.take().empty());
    const auto files = files_in(dir_);
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? fs::path() : files[0];
  }

  fs::path dir_;
  Warnings warnings_;
};

TEST_F(PipelineCache, OneFilePerDeviceWrittenAtTheEndAndReadBackWithoutWarnings) {
  const fs::path file = written_file();
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(file.filename().string().rfind("pipelines-", 0), 0u) << file;
  EXPECT_EQ(file.extension(), ".bin");
  EXPECT_GE(fs::file_size(file), 32u);  // at least Vulkan's cache header
  {
    Context ctx(options(dir_, warnings_));
    use(ctx);
    ctx.save_pipeline_cache();
  }
  EXPECT_TRUE(warnings_.take().empty());
  EXPECT_EQ(files_in(dir_).size(), 1u);  // no temporary file left behind
}

TEST_F(PipelineCache, CorruptForeignOrHugeFilesAreIgnoredWithAWarning) {
  const fs::path file = written_file();
  ASSERT_FALSE(file.empty());
  std::vector<char> good(fs::file_size(file));
  std::ifstream(file, std::ios::binary).read(good.data(), static_cast<std::streamsize>(good.size()));

  auto start_with = [&](const std::vector<char>& bytes, const std::string& expected) {
    SCOPED_TRACE(expected);
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    {
      Context ctx(options(dir_, warnings_));
      use(ctx);
    }
    const auto w = warnings_.take();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_NE(w[0].find(file.string()), std::string::npos) << w[0];
    EXPECT_NE(w[0].find(expected), std::string::npos) << w[0];
    // The context wrote a cache of its own over the bad file: the next start is clean.
    { Context ctx(options(dir_, warnings_)); }
    EXPECT_TRUE(warnings_.take().empty());
  };
  start_with(std::vector<char>(7, 'x'), "7 bytes is not a pipeline cache");
  std::vector<char> garbage(4096);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
  start_with(garbage, "is not a relpos pipeline cache");
  // relpos's envelope: "relposPC", version 1, the data's CRC-32, its size; then the driver's data.
  constexpr std::size_t kEnvelope = 24;
  ASSERT_EQ(std::string(good.data(), 8), "relposPC");
  // One byte flipped anywhere in the data (RADV crashed on one past its header; lavapipe's data is
  // its 32-byte header alone), or cut short: never handed to the driver.
  for (const std::size_t at : {kEnvelope + 40, kEnvelope + (good.size() - kEnvelope) / 2, good.size() - 1}) {
    if (at >= good.size()) continue;
    std::vector<char> flipped = good;
    flipped[at] ^= 0x5a;
    start_with(flipped, "is corrupt");
  }
  if (good.size() > kEnvelope + 33) start_with(std::vector<char>(good.begin(), good.end() - 1), "is corrupt");  // (more than a header)
  // Intact, but another device's cache (the first byte of pipelineCacheUUID changed, the envelope's
  // checksum made again): the driver's header is checked too.
  std::vector<char> foreign = good;
  foreign[kEnvelope + 16] ^= 0x5a;
  const auto crc = static_cast<std::uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(foreign.data() + kEnvelope), static_cast<uInt>(foreign.size() - kEnvelope)));
  std::memcpy(foreign.data() + 12, &crc, 4);
  start_with(foreign, "another device");

  // A file larger than any cache relpos writes is refused before it is read.
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(good.data(), 32);
  fs::resize_file(file, 300ull << 20);
  {
    Context ctx(options(dir_, warnings_));
    use(ctx);
  }
  const auto w = warnings_.take();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("314572800 bytes is not a pipeline cache"), std::string::npos) << w[0];
}

TEST_F(PipelineCache, AnUnwritableDirectoryIsAWarningNotAFailure) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "not a directory";
  {
    Context ctx(options(dir_ / "file" / "cache", warnings_));
    use(ctx);
  }
  const auto w = warnings_.take();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("not saved"), std::string::npos) << w[0];
}

TEST_F(PipelineCache, NoneWithoutAPath) {
  ContextOptions o = options(dir_, warnings_);
  o.pipeline_cache_path.clear();
  {
    Context ctx(o);
    use(ctx);
    ctx.save_pipeline_cache();
  }
  EXPECT_TRUE(warnings_.take().empty());
  EXPECT_FALSE(fs::exists(dir_));
}

}  // namespace
