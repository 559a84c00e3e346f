#include "heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace relpos::tool {
namespace {

// Pixels of the map's long side: small arrays are scaled up to at least kMinLong (whole pixels per
// cell); no more than kMaxBlocks blocks per side (longer axes are reduced); a side shorter than
// kMinShort (one query row) gets taller blocks so that it stays visible.
constexpr int kMinLong = 256, kMaxBlocks = 2048, kMinShort = 32;
constexpr int kMargin = 16, kTitleScale = 2, kLabelScale = 2;
constexpr int kBarWidth = 24, kBarMinHeight = 192, kGap = 24;
constexpr Rgb kBackground{255, 255, 255}, kInk{0, 0, 0}, kEdge{96, 96, 96};

HeatmapSummary summarise(std::span<const float> values) {
  HeatmapSummary s;
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (float v : values) {
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    } else if (v == -std::numeric_limits<float>::infinity()) {
      ++s.masked;
    } else {
      ++s.invalid;
    }
  }
  s.any_finite = lo <= hi;
  if (s.any_finite) s.min = lo + 0.0f, s.max = hi + 0.0f;  // -0 + 0 is +0: a causal bias's maximum reads "0", not "-0"
  return s;
}

// A block's value is its largest: the strongest attention in it stays visible, it is masked only
// where all of it is, and a NaN anywhere in it shows.
float combine(float a, float b) { return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b); }

struct Blocks {
  std::uint64_t rows, cols;      // blocks per side
  std::uint64_t per_y, per_x;    // cells per block along each side
  std::vector<float> values;     // [rows, cols]
};

Blocks reduce_to_blocks(std::span<const float> values, std::uint64_t rows, std::uint64_t cols) {
  Blocks b;
  b.per_y = (rows + kMaxBlocks - 1) / kMaxBlocks;
  b.per_x = (cols + kMaxBlocks - 1) / kMaxBlocks;
  b.rows = (rows + b.per_y - 1) / b.per_y;
  b.cols = (cols + b.per_x - 1) / b.per_x;
  b.values.assign(b.rows * b.cols, -std::numeric_limits<float>::infinity());
  for (std::uint64_t i = 0; i < rows; ++i) {
    float* out = &b.values[(i / b.per_y) * b.cols];
    const float* in = &values[i * cols];
    for (std::uint64_t j = 0; j < cols; ++j) out[j / b.per_x] = combine(out[j / b.per_x], in[j]);
  }
  return b;
}

HeatmapLayout layout_of(const Blocks& b) {
  HeatmapLayout l;
  const int rows = static_cast<int>(b.rows), cols = static_cast<int>(b.cols);
  const int longest = std::max(rows, cols);
  l.block_w = l.block_h = std::max(1, (kMinLong + longest - 1) / longest);
  if (rows * l.block_h < kMinShort) l.block_h = (kMinShort + rows - 1) / rows;
  if (cols * l.block_w < kMinShort) l.block_w = (kMinShort + cols - 1) / cols;
  l.map_w = cols * l.block_w;
  l.map_h = rows * l.block_h;
  l.cells_per_block_x = b.per_x;
  l.cells_per_block_y = b.per_y;
  return l;
}

Rgb colour_of(float v, const HeatmapSummary& s) {
  if (v == -std::numeric_limits<float>::infinity()) return kMaskedColour;
  if (!std::isfinite(v)) return kInvalidColour;
  // A constant slice has no range to divide by: it takes the middle of the scale.
  if (!(s.max > s.min)) return viridis(0.5);
  return viridis((static_cast<double>(v) - s.min) / (static_cast<double>(s.max) - s.min));
}

std::string number(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", static_cast<double>(v));
  return buf;
}

// The colour bar, from the maximum at its top to the minimum at its bottom, labelled with both,
// and under it a key of the off-scale colours the map uses.
struct ColourBar {
  int x = 0, y = 0, h = 0;
  std::string top, bottom;
  std::vector<std::pair<Rgb, std::string>> key;

  int label_x() const { return x + kBarWidth + 8; }
  int key_y() const { return y + h + 12; }
  int right() const {
    int r = label_x() + std::max(text_width(top, kLabelScale), text_width(bottom, kLabelScale));
    for (const auto& entry : key) r = std::max(r, label_x() + text_width(entry.second, kLabelScale));
    return r;
  }
  int bottom_edge() const { return key_y() + static_cast<int>(key.size()) * text_height(kLabelScale); }

  void draw(Image& image) const {
    for (int row = 0; row < h; ++row) image.fill(x, y + row, kBarWidth, 1, viridis(1.0 - static_cast<double>(row) / std::max(1, h - 1)));
    image.frame(x, y, kBarWidth, h, kEdge);
    const int glyph = 9 * kLabelScale;  // a digit's height
    draw_text(image, label_x(), y, top, kLabelScale, kInk);
    draw_text(image, label_x(), y + h - glyph, bottom, kLabelScale, kInk);
    for (std::size_t k = 0; k < key.size(); ++k) {
      const int ky = key_y() + static_cast<int>(k) * text_height(kLabelScale);
      image.fill(x, ky, kBarWidth, glyph, key[k].first);
      image.frame(x, ky, kBarWidth, glyph, kEdge);
      draw_text(image, label_x(), ky, key[k].second, kLabelScale, kInk);
    }
  }
};

}  // namespace

Rgb viridis(double t) {
  static constexpr Rgb points[] = {{0x44, 0x01, 0x54}, {0x47, 0x2d, 0x7b}, {0x3b, 0x52, 0x8b}, {0x2c, 0x72, 0x8e}, {0x21, 0x91, 0x8c},
                                   {0x28, 0xae, 0x80}, {0x5e, 0xc9, 0x62}, {0xad, 0xdc, 0x30}, {0xfd, 0xe7, 0x25}};
  constexpr int last = static_cast<int>(std::size(points)) - 1;
  const double x = std::clamp(t, 0.0, 1.0) * last;
  const int i = std::min(static_cast<int>(x), last - 1);
  const double f = x - i;
  const auto mix = [f](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>(std::lround(a + (b - a) * f)); };
  return {mix(points[i].r, points[i + 1].r), mix(points[i].g, points[i + 1].g), mix(points[i].b, points[i + 1].b)};
}

Heatmap draw_heatmap(std::span<const float> values, std::uint64_t rows, std::uint64_t cols, const std::string& title) {
  const HeatmapSummary s = summarise(values);
  const Blocks blocks = reduce_to_blocks(values, rows, cols);
  HeatmapLayout l = layout_of(blocks);
  l.map_x = kMargin;
  l.map_y = kMargin + text_height(kTitleScale);

  std::vector<std::string> caption = {std::to_string(rows) + " queries x " + std::to_string(cols) + " keys"};
  if (blocks.per_x > 1 || blocks.per_y > 1)
    // In the first line's order, named: the tool's printed line gives cells as x (keys) by y (queries).
    caption.push_back("block = max of " + std::to_string(blocks.per_y) + (blocks.per_y == 1 ? " query x " : " queries x ") +
                      std::to_string(blocks.per_x) + (blocks.per_x == 1 ? " key" : " keys"));
  int caption_scale = 2, caption_w = 0;  // half size where full size would be wider than the map
  for (const auto& line : caption)
    if (text_width(line, 2) > l.map_w) caption_scale = 1;
  for (const auto& line : caption) caption_w = std::max(caption_w, text_width(line, caption_scale));

  ColourBar bar;
  bar.x = l.map_x + std::max(l.map_w, caption_w) + kGap;  // clear of the caption, whose lines the key's would meet
  bar.y = l.map_y;
  bar.h = std::max(l.map_h, kBarMinHeight);
  bar.top = s.any_finite ? number(s.max) : "no finite";
  bar.bottom = s.any_finite ? number(s.min) : "values";
  if (s.masked) bar.key.emplace_back(kMaskedColour, "-inf (masked)");
  if (s.invalid) bar.key.emplace_back(kInvalidColour, "NaN / +inf");

  // A long title widens the image up to a limit and is cut off beyond it.
  const int right = bar.right() + kMargin;
  const int width = std::max(right, std::min(l.map_x + text_width(title, kTitleScale) + kMargin, right + 1024));
  const int caption_bottom = l.map_y + l.map_h + 8 + static_cast<int>(caption.size()) * text_height(caption_scale);
  const int height = std::max(caption_bottom, bar.bottom_edge()) + kMargin;

  Image image(width, height, kBackground);
  draw_text(image, kMargin, kMargin, title, kTitleScale, kInk);
  for (std::uint64_t i = 0; i < blocks.rows; ++i)
    for (std::uint64_t j = 0; j < blocks.cols; ++j)
      image.fill(l.map_x + static_cast<int>(j) * l.block_w, l.map_y + static_cast<int>(i) * l.block_h, l.block_w, l.block_h,
                 colour_of(blocks.values[i * blocks.cols + j], s));
  image.frame(l.map_x, l.map_y, l.map_w, l.map_h, kEdge);
  for (std::size_t k = 0; k < caption.size(); ++k)
    draw_text(image, l.map_x, l.map_y + l.map_h + 8 + static_cast<int>(k) * text_height(caption_scale), caption[k], caption_scale, kInk);
  bar.draw(image);
  return {std::move(image), l, s};
}

}  // namespace relpos::tool
