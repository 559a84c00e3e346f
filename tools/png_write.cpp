// The one translation unit that compiles stb_image_write (Debian's libstb-dev). Its stdio writer
// is left out: the tool opens the file itself so that a failure can say why (errno).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#include <stb/stb_image_write.h>

#include <relpos/error.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "image.hpp"

namespace relpos::tool {

void write_png(const std::string& flag, const std::string& path, const Image& image) {
  const std::string what = flag + " = " + path;
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw InvalidArgument(what + ": cannot open for writing: " + std::strerror(errno));
  struct Sink {
    std::FILE* f;
    int error = 0;  // errno of the first failed write
  } sink{f};
  const int encoded = stbi_write_png_to_func(
      [](void* context, void* data, int size) {
        auto* s = static_cast<Sink*>(context);
        if (!s->error && std::fwrite(data, 1, static_cast<std::size_t>(size), s->f) != static_cast<std::size_t>(size))
          s->error = errno ? errno : EIO;
      },
      &sink, image.width(), image.height(), 3, image.data(), image.width() * 3);
  if (std::fclose(f) != 0 && !sink.error) sink.error = errno ? errno : EIO;
  if (!encoded || sink.error) {
    // A truncated PNG would look like a result; but a device or a pipe (/dev/full, /dev/stdout)
    // is not ours to delete.
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) std::filesystem::remove(path, ec);
    if (!encoded) throw Error(what + ": stb_image_write could not encode the PNG (out of memory)");
    throw Error(what + ": write failed: " + std::strerror(sink.error));
  }
}

}  // namespace relpos::tool
