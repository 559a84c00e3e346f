#pragma once
// `relpos plot IN.npy [--batch B] [--head H] [--title T] --out F.png`: one [Q, K] slice of a bias
// or logits array as a heat map (tools/heatmap.hpp). Needs no Vulkan device.
#include "cli_fwd.hpp"

#include <cstdint>
#include <string>

namespace relpos::tool {

struct PlotOptions {
  std::string input, title, out;
  std::uint64_t batch = 0, head = 0;
};
void add_plot_options(CLI::App& cmd, PlotOptions& o);
int plot_command(const PlotOptions& o);

}  // namespace relpos::tool
