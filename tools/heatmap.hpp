#pragma once
// The picture `relpos plot` draws of one [rows, cols] slice: a heat map in viridis from the finite
// minimum to the finite maximum, a colour bar labelled with both, a key for the values that lie
// off the scale, and a title. docs/plots.md describes what users see.
#include <cstdint>
#include <span>
#include <string>

#include "image.hpp"

namespace relpos::tool {

// Values off the colour scale get colours viridis never takes (it has no grey and no magenta).
inline constexpr Rgb kMaskedColour{128, 128, 128};   // -inf: a masked position
inline constexpr Rgb kInvalidColour{255, 0, 255};    // NaN or +inf: an error in the data, never hidden

// Viridis (matplotlib's, 9 evenly spaced control points, linear between them) at t in [0, 1].
Rgb viridis(double t);

// Where the map lies in the image and how cells became pixels: each pixel block (block_w x
// block_h pixels) shows cells_per_block_y x cells_per_block_x cells, the block's largest value.
struct HeatmapLayout {
  int map_x = 0, map_y = 0, map_w = 0, map_h = 0;
  int block_w = 0, block_h = 0;
  std::uint64_t cells_per_block_x = 1, cells_per_block_y = 1;
};

struct HeatmapSummary {
  bool any_finite = false;
  float min = 0.0f, max = 0.0f;  // of the finite values
  std::uint64_t masked = 0;      // -inf
  std::uint64_t invalid = 0;     // NaN or +inf
};

struct Heatmap {
  Image image;
  HeatmapLayout layout;
  HeatmapSummary summary;
};

// `values` is row-major [rows, cols], rows and cols >= 1.
Heatmap draw_heatmap(std::span<const float> values, std::uint64_t rows, std::uint64_t cols, const std::string& title);

}  // namespace relpos::tool
