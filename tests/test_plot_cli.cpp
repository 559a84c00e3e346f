// `relpos plot` as scripts use it: the PNG read back (stb_image, as any viewer would) has the
// documented size and colours (-inf grey, NaN magenta, the minimum and maximum at viridis's ends),
// long rows are reduced, and every bad input is refused with a message naming the flag or file.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <regex>

// Only this test decodes PNGs: stb_image's implementation lives here, PNG only.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#include <stb/stb_image.h>

#include "support/run_tool.hpp"

using namespace relpos;
using relpos::test::tool;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Rgb {
  int r, g, b;
  bool operator==(const Rgb&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Rgb& c) { return os << "(" << c.r << ", " << c.g << ", " << c.b << ")"; }

// The colours README documents: viridis's two ends and middle, and the two off-scale colours.
constexpr Rgb kMinColour{68, 1, 84}, kMaxColour{253, 231, 37}, kMiddleColour{33, 145, 140};
constexpr Rgb kMasked{128, 128, 128}, kInvalid{255, 0, 255};

std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / ("relpos_plot_cli_" + name)).string(); }

std::string save(const std::string& name, const std::vector<float>& x, std::vector<std::uint64_t> shape, DType dtype = DType::F32) {
  if (dtype == DType::F16) write_npy(temp(name), dtype, shape, to_half(x).data());
  else write_npy(temp(name), dtype, shape, x.data());
  return temp(name);
}

// The line the tool prints: image size, where the map lies and how cells became pixel blocks.
struct Printed {
  int width, height, map_w, map_h, map_x, map_y, block_w, block_h, cells_x, cells_y;
};
Printed parse(const std::string& output) {
  static const std::regex re(R"(: (\d+)x(\d+) px; map (\d+)x(\d+) px at \((\d+),(\d+)\); block (\d+)x(\d+) px = (\d+)x(\d+) cells)");
  std::smatch m;
  if (!std::regex_search(output, m, re)) {
    ADD_FAILURE() << "no layout line in: " << output;
    return {};
  }
  int v[10];
  for (int i = 0; i < 10; ++i) v[i] = std::stoi(m[i + 1].str());
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]};
}

struct Png {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  Rgb at(int x, int y) const {
    const unsigned char* p = &rgb[(static_cast<std::size_t>(y) * width + x) * 3];
    return {p[0], p[1], p[2]};
  }
};
Png load(const std::string& path) {
  Png png;
  int channels = 0;
  unsigned char* data = stbi_load(path.c_str(), &png.width, &png.height, &channels, 3);
  if (!data) {
    ADD_FAILURE() << path << ": " << stbi_failure_reason();
    return png;
  }
  png.rgb.assign(data, data + static_cast<std::size_t>(png.width) * png.height * 3);
  stbi_image_free(data);
  return png;
}

// `relpos plot ARGS --out <png>`: what it printed and the picture read back.
struct Plotted {
  relpos::test::ToolResult result;
  Printed layout;
  Png png;
  // The colour at the centre of block (row, col) of the map.
  Rgb block(int row, int col) const {
    const Printed& p = layout;
    return png.at(p.map_x + col * p.block_w + p.block_w / 2, p.map_y + row * p.block_h + p.block_h / 2);
  }
};
Plotted plot(const std::string& args, const std::string& png) {
  Plotted out;
  out.result = tool("plot " + args + " --out " + temp(png));
  if (out.result.status != 0) {
    ADD_FAILURE() << args << "\n" << out.result.output;
    return out;
  }
  out.layout = parse(out.result.output);
  out.png = load(temp(png));
  EXPECT_EQ(out.png.width, out.layout.width);
  EXPECT_EQ(out.png.height, out.layout.height);
  return out;
}

}  // namespace

// Head 1 of [2, 3, 4]: its minimum, maximum and masked cell get the documented colours, and the
// scale is that head's alone (head 0's far larger values would otherwise move it).
TEST(PlotCli, MinMaxAndMaskedCellsHaveTheirColours) {
  std::vector<float> x(2 * 3 * 4, 100.0f);
  x[0] = -100.0f;
  float* h1 = &x[12];
  for (int i = 0; i < 12; ++i) h1[i] = 0.25f * static_cast<float>(i % 5);
  h1[0 * 4 + 1] = -3.0f;  // minimum
  h1[2 * 4 + 3] = 5.0f;   // maximum
  h1[1 * 4 + 2] = -kInf;  // masked
  const Plotted r = plot(save("heads.npy", x, {2, 3, 4}) + " --head 1", "heads.png");
  ASSERT_EQ(r.result.status, 0);
  const Printed& p = r.layout;
  // 4 keys on the long side: 64-pixel blocks make the map 256 pixels wide.
  EXPECT_EQ(p.block_w, 64);
  EXPECT_EQ(p.block_h, 64);
  EXPECT_EQ(p.map_w, 4 * 64);
  EXPECT_EQ(p.map_h, 3 * 64);
  EXPECT_GT(r.png.width, p.map_x + p.map_w);  // the colour bar and its labels
  EXPECT_EQ(r.block(0, 1), kMinColour);
  EXPECT_EQ(r.block(2, 3), kMaxColour);
  EXPECT_EQ(r.block(1, 2), kMasked);
  const Rgb other = r.block(0, 2);
  EXPECT_NE(other, kMinColour);
  EXPECT_NE(other, kMaxColour);
  EXPECT_NE(r.result.output.find("finite values in [-3, 5]; 1 -inf"), std::string::npos) << r.result.output;
}

TEST(PlotCli, Float16BatchAndHeadPickTheSlice) {
  std::vector<float> x(2 * 2 * 2 * 2, 7.0f);
  float* s = &x[(1 * 2 + 0) * 4];  // batch 1, head 0
  s[0] = 1.0f, s[1] = -kInf, s[2] = 2.0f, s[3] = 1.5f;
  const Plotted r = plot(save("b.npy", x, {2, 2, 2, 2}, DType::F16) + " --batch 1 --head 0", "b.png");
  ASSERT_EQ(r.result.status, 0);
  EXPECT_EQ(r.block(0, 0), kMinColour);
  EXPECT_EQ(r.block(0, 1), kMasked);
  EXPECT_EQ(r.block(1, 0), kMaxColour);
}

// A constant slice has no range to scale by: the middle of viridis, no division by zero.
TEST(PlotCli, ConstantSliceTakesTheMiddleColour) {
  const Plotted r = plot(save("const.npy", {2.5f, 2.5f, -kInf, 2.5f}, {2, 2}) + " --title constant", "const.png");
  ASSERT_EQ(r.result.status, 0);
  EXPECT_EQ(r.block(0, 0), kMiddleColour);
  EXPECT_EQ(r.block(1, 0), kMasked);
}

TEST(PlotCli, NanIsDrawnInItsOwnColour) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Plotted r = plot(save("nan.npy", {0.0f, nan, kInf, 1.0f}, {2, 2}), "nan.png");
  ASSERT_EQ(r.result.status, 0);
  EXPECT_EQ(r.block(0, 1), kInvalid);
  EXPECT_EQ(r.block(1, 0), kInvalid);
  EXPECT_EQ(r.block(1, 1), kMaxColour);
  EXPECT_NE(r.result.output.find("0 -inf, 2 NaN/+inf"), std::string::npos) << r.result.output;
}

// One query against 200,000 keys: blocks of 98 keys each show their maximum, in an image no wider
// than the 2,048-block limit, and the single row is drawn tall enough to see.
TEST(PlotCli, LongRowIsReducedToItsBlockMaxima) {
  std::vector<float> x(200000, 0.0f);
  for (int j = 0; j < 98; ++j) x[j] = -kInf;
  x[123457] = 1.0f;
  const Plotted r = plot(save("long.npy", x, {1, 200000}), "long.png");
  ASSERT_EQ(r.result.status, 0);
  const Printed& p = r.layout;
  EXPECT_EQ(p.cells_x, 98);
  EXPECT_EQ(p.cells_y, 1);
  EXPECT_EQ(p.map_w, (200000 + 97) / 98);
  EXPECT_GE(p.map_h, 32);
  EXPECT_LE(r.png.width, 2048 + 400);
  EXPECT_EQ(r.block(0, 0), kMasked);
  EXPECT_EQ(r.block(0, 123457 / 98), kMaxColour);
  EXPECT_EQ(r.block(0, 1), kMinColour);
}

TEST(PlotCli, BadInputsAreRefusedNamingTheFlag) {
  const std::string heads = save("e_heads.npy", std::vector<float>(3 * 4 * 4, 1.0f), {3, 4, 4});
  const std::string batched = save("e_batched.npy", std::vector<float>(2 * 8, 1.0f), {2, 1, 2, 4});
  const std::string square = save("e_square.npy", std::vector<float>(16, 1.0f), {4, 4});
  const std::vector<std::int32_t> ints(16, 1);
  const std::vector<std::uint64_t> ints_shape = {4, 4};
  write_npy(temp("e_ints.npy"), DType::I32, ints_shape, ints.data());
  std::filesystem::remove(temp("e.png"));
  const std::string out = " --out " + temp("e.png");
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {heads + " --head 3" + out, "--head = 3: must be in [0, 2]"},
      {heads + " --head -1" + out, "--head = -1"},
      {batched + " --batch 2" + out, "--batch = 2: must be in [0, 1]"},
      {square + " --head 1" + out, "--head = 1: must be 0"},
      {square + " --batch 1" + out, "--batch = 1: must be 0"},
      {save("e_rank1.npy", {1.0f, 2.0f}, {2}) + out, "rank 1"},
      {save("e_rank5.npy", {1.0f, 2.0f}, {1, 1, 1, 1, 2}) + out, "rank 5"},
      {save("e_empty.npy", {}, {0, 4}) + out, "empty"},
      {temp("e_ints.npy") + out, "not a float array"},
      {temp("e_missing.npy") + out, "cannot open for reading"},
      {square + " --out " + temp("no_such_dir/x.png"), "--out = " + temp("no_such_dir/x.png") + ": cannot open for writing"},
      {square, "--out is required"},
  };
  for (const auto& c : cases) {
    const auto r = tool("plot " + c.args);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(temp("e.png")));
}

// A write that fails after the file opened (a full disk) says so, and a device named by --out is
// left in place (the tool removes only a regular file it truncated).
TEST(PlotCli, FailedWriteIsReportedAndLeavesDevicesAlone) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto r = tool("plot " + save("full.npy", std::vector<float>(16, 1.0f), {4, 4}) + " --out /dev/full");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--out = /dev/full: write failed"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists("/dev/full"));
}
