#include "image.hpp"

#include <stb/stb_easy_font.h>

#include <algorithm>
#include <cmath>

namespace relpos::tool {
namespace {

// stb_easy_font indexes its glyph table by (byte - 32) with no check, so anything outside
// printable ASCII must never reach it.
std::string printable(const std::string& text) {
  std::string s = text;
  for (char& c : s)
    if (c < 32 || c > 126) c = '?';
  return s;
}

}  // namespace

Image::Image(int width, int height, Rgb background)
    : width_(width), height_(height), pixels_(static_cast<std::size_t>(width) * height * 3) {
  fill(0, 0, width, height, background);
}

void Image::fill(int x, int y, int w, int h, Rgb colour) {
  const int x0 = std::max(x, 0), y0 = std::max(y, 0);
  const int x1 = std::min(x + w, width_), y1 = std::min(y + h, height_);
  for (int row = y0; row < y1; ++row)
    for (int col = x0; col < x1; ++col) {
      std::uint8_t* p = &pixels_[(static_cast<std::size_t>(row) * width_ + col) * 3];
      p[0] = colour.r;
      p[1] = colour.g;
      p[2] = colour.b;
    }
}

void Image::frame(int x, int y, int w, int h, Rgb colour) {
  fill(x - 1, y - 1, w + 2, 1, colour);
  fill(x - 1, y + h, w + 2, 1, colour);
  fill(x - 1, y, 1, h, colour);
  fill(x + w, y, 1, h, colour);
}

int text_width(const std::string& text, int scale) {
  std::string s = printable(text);
  return stb_easy_font_width(s.data()) * scale;
}

int text_height(int scale) { return 12 * scale; }  // stb_easy_font's line advance

void draw_text(Image& image, int x, int y, const std::string& text, int scale, Rgb colour) {
  std::string s = printable(text);
  // ~270 bytes a character (stb_easy_font's estimate); 64 bytes a quad of four vertices.
  std::vector<char> quads(s.size() * 320 + 64);
  const int n = stb_easy_font_print(0.0f, 0.0f, s.data(), nullptr, quads.data(), static_cast<int>(quads.size()));
  for (int q = 0; q < n; ++q) {
    // Each quad is an axis-aligned rectangle: vertices 0 and 2 are opposite corners.
    const float* v0 = reinterpret_cast<const float*>(&quads[q * 64]);
    const float* v2 = reinterpret_cast<const float*>(&quads[q * 64 + 32]);
    const int qx = static_cast<int>(std::lround(v0[0])), qy = static_cast<int>(std::lround(v0[1]));
    const int qw = static_cast<int>(std::lround(v2[0] - v0[0])), qh = static_cast<int>(std::lround(v2[1] - v0[1]));
    image.fill(x + qx * scale, y + qy * scale, qw * scale, qh * scale, colour);
  }
}

}  // namespace relpos::tool
