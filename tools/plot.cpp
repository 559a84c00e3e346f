#include "number_flags.hpp"
#include "plot.hpp"

#include <relpos/error.hpp>
#include <relpos/npy.hpp>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "heatmap.hpp"
#include "numbers.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

// The index of --batch or --head, checked against its dimension (1 where the array lacks it).
void check_index(const std::string& flag, std::uint64_t value, std::uint64_t size, const std::string& one, const std::string& many,
                 const std::string& array) {
  if (value < size) return;
  if (size == 1) throw InvalidArgument(flag + " = " + std::to_string(value) + ": must be 0: " + array + " has a single " + one);
  throw InvalidArgument(flag + " = " + std::to_string(value) + ": must be in [0, " + std::to_string(size - 1) + "]: " + array + " has " +
                        std::to_string(size) + " " + many);
}

}  // namespace

void add_plot_options(CLI::App& cmd, PlotOptions& o) {
  cmd.add_option("input", o.input, "IN.npy: float16/32/64 [Q, K], [H, Q, K] or [B, H, Q, K]")->required()->type_name("IN.npy");
  add_number(cmd, "--batch", o.batch, "batch index of a [B, H, Q, K] array (default 0)");
  add_number(cmd, "--head", o.head, "head index of an [H, Q, K] or [B, H, Q, K] array (default 0)");
  cmd.add_option("--title", o.title, "title drawn above the map (default: the file name, batch and head)");
  cmd.add_option("--out", o.out, "output .png file")->required();
}

int plot_command(const PlotOptions& o) {
  const NpyArray a = read_npy(o.input);
  const std::vector<std::uint64_t>& s = a.shape;
  const std::string array = "IN.npy " + o.input + " of shape " + shape_text(s);
  const std::size_t rank = s.size();
  if (rank < 2 || rank > 4)
    throw InvalidArgument(array + ": rank " + std::to_string(rank) + "; relpos plot takes [Q, K], [H, Q, K] or [B, H, Q, K]");
  const std::uint64_t n = a.elements();
  if (n == 0) throw InvalidArgument(array + ": empty, nothing to plot");
  const std::uint64_t batches = rank == 4 ? s[0] : 1, heads = rank >= 3 ? s[rank - 3] : 1, rows = s[rank - 2], cols = s[rank - 1];
  check_index("--batch", o.batch, batches, "batch", "batches", array);
  check_index("--head", o.head, heads, "head", "heads", array);

  // Only the chosen slice is converted to float32; the file's other slices stay in its dtype.
  const std::size_t element = a.bytes.size() / n;
  const std::uint64_t first = (o.batch * heads + o.head) * rows * cols;
  NpyArray slice{a.descr, {rows, cols}, {}};
  slice.bytes.assign(a.bytes.begin() + static_cast<std::ptrdiff_t>(first * element),
                     a.bytes.begin() + static_cast<std::ptrdiff_t>((first + rows * cols) * element));
  const std::vector<float> values = slice.to_f32(array);

  std::string title = o.title;
  if (title.empty()) {
    title = std::filesystem::path(o.input).filename().string();
    if (rank == 4) title += ", batch " + std::to_string(o.batch);
    if (rank >= 3) title += ", head " + std::to_string(o.head);
  }
  const Heatmap h = draw_heatmap(values, rows, cols, title);
  write_png("--out", o.out, h.image);

  // What a script needs to find a cell in the picture, and the range the colours span.
  const HeatmapLayout& l = h.layout;
  std::printf("wrote %s: %dx%d px; map %dx%d px at (%d,%d); block %dx%d px = %llux%llu cells; ", o.out.c_str(), h.image.width(),
              h.image.height(), l.map_w, l.map_h, l.map_x, l.map_y, l.block_w, l.block_h,
              static_cast<unsigned long long>(l.cells_per_block_x), static_cast<unsigned long long>(l.cells_per_block_y));
  if (h.summary.any_finite) std::printf("finite values in [%g, %g]", static_cast<double>(h.summary.min), static_cast<double>(h.summary.max));
  else std::printf("no finite values");
  std::printf("; %llu -inf, %llu NaN/+inf\n", static_cast<unsigned long long>(h.summary.masked), static_cast<unsigned long long>(h.summary.invalid));
  return 0;
}

}  // namespace relpos::tool
