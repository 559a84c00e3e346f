#pragma once
// An RGB raster for `relpos plot`: filled rectangles, text (stb_easy_font's quads) and a PNG file
// (stb_image_write). Everything drawn is clipped to the image, so a long title cannot write past it.
#include <cstdint>
#include <string>
#include <vector>

namespace relpos::tool {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

class Image {
 public:
  Image(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  const std::uint8_t* data() const { return pixels_.data(); }  // rows of width * 3 bytes
  void fill(int x, int y, int w, int h, Rgb colour);
  void frame(int x, int y, int w, int h, Rgb colour);  // a one-pixel outline just outside the rectangle

 private:
  int width_, height_;
  std::vector<std::uint8_t> pixels_;
};

// stb_easy_font's glyphs at `scale` pixels per font unit: ASCII only, so any other byte (UTF-8
// included) is drawn as '?'.
int text_width(const std::string& text, int scale);
int text_height(int scale);  // one line, including the gap below it
void draw_text(Image& image, int x, int y, const std::string& text, int scale, Rgb colour);

// Writes the image as an 8-bit RGB PNG; errors name `flag` (the option that gave the path) and
// why (errno). A file that cannot be created is an InvalidArgument; a failed write (a full disk)
// an Error, and leaves no truncated file behind.
void write_png(const std::string& flag, const std::string& path, const Image& image);

}  // namespace relpos::tool
