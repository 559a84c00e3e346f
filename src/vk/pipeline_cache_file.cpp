#include "vk/pipeline_cache_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <zlib.h>

namespace relpos::detail {
namespace {

// relpos's envelope around the driver's cache data: the driver checks only its own header and
// trusts the rest (RADV crashed on a cache with one byte flipped past it), so the file carries
// the data's size and CRC-32, checked before the driver sees a byte.
struct Envelope {
  char magic[8] = {'r', 'e', 'l', 'p', 'o', 's', 'P', 'C'};
  std::uint32_t version = 1;
  std::uint32_t crc = 0;  // zlib's crc32 of the data
  std::uint64_t bytes = 0;
};
static_assert(sizeof(Envelope) == 24);

std::uint32_t crc_of(const char* data, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::size_t done = 0; done < n;) {  // (crc32 takes a uInt count)
    const uInt piece = static_cast<uInt>(std::min<std::size_t>(n - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + done), piece);
    done += piece;
  }
  return static_cast<std::uint32_t>(crc);
}

// A cache larger than this is not relpos's (every pipeline of every op is a few MiB): refused
// before anything is allocated for it.
constexpr std::uintmax_t kMaxCacheBytes = 256ull << 20;

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[bytes[i] >> 4];
    s += digits[bytes[i] & 15];
  }
  return s;
}

}  // namespace

std::filesystem::path pipeline_cache_file(const std::filesystem::path& dir, const VkPhysicalDeviceProperties& props) {
  return dir / ("pipelines-" + hex(props.pipelineCacheUUID, VK_UUID_SIZE) + ".bin");
}

std::vector<char> read_pipeline_cache(const std::filesystem::path& file, const VkPhysicalDeviceProperties& props, const Warn& warn) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return {};
  const std::string where = "pipeline cache " + file.string() + ": ";
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) {
    warn(where + ec.message() + "; starting with an empty cache");
    return {};
  }
  VkPipelineCacheHeaderVersionOne header{};
  if (size < sizeof(Envelope) || size > kMaxCacheBytes) {
    warn(where + std::to_string(size) + " bytes is not a pipeline cache (" + std::to_string(sizeof(Envelope)) + " to " +
         std::to_string(kMaxCacheBytes) + "); starting with an empty cache");
    return {};
  }
  std::vector<char> file_bytes(size);
  std::ifstream in(file, std::ios::binary);
  if (!in.read(file_bytes.data(), static_cast<std::streamsize>(size))) {
    warn(where + "could not be read; starting with an empty cache");
    return {};
  }
  Envelope envelope, ours_envelope;
  std::memcpy(&envelope, file_bytes.data(), sizeof envelope);
  if (std::memcmp(envelope.magic, ours_envelope.magic, sizeof envelope.magic) != 0 || envelope.version != ours_envelope.version) {
    warn(where + "is not a relpos pipeline cache (or one of an older relpos); starting with an empty cache");
    return {};
  }
  std::vector<char> data(file_bytes.begin() + sizeof envelope, file_bytes.end());
  if (envelope.bytes != data.size() || data.size() < sizeof header || envelope.crc != crc_of(data.data(), data.size())) {
    warn(where + "is corrupt (its size or checksum does not match its data); starting with an empty cache");
    return {};
  }
  std::memcpy(&header, data.data(), sizeof header);
  const bool ours = header.headerSize >= sizeof header && header.headerSize <= size &&
                    header.headerVersion == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && header.vendorID == props.vendorID &&
                    header.deviceID == props.deviceID && std::memcmp(header.pipelineCacheUUID, props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
  if (!ours) {
    warn(where + "its header names another device, driver or format; starting with an empty cache");
    return {};
  }
  return data;
}

void write_pipeline_cache(const std::filesystem::path& file, const std::vector<char>& data, const Warn& warn) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) {
    warn("pipeline cache " + file.parent_path().string() + ": " + ec.message() + "; not saved");
    return;
  }
  // Unique per writer: the process, and a count of this process's writes (two Contexts of one
  // device save the same file).
  static std::atomic<std::uint64_t> writes{0};
  const std::filesystem::path temp = file.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(writes++);
  bool ok = false;
  Envelope envelope;
  envelope.crc = crc_of(data.data(), data.size());
  envelope.bytes = data.size();
  if (std::FILE* f = std::fopen(temp.c_str(), "wb")) {
    ok = std::fwrite(&envelope, sizeof envelope, 1, f) == 1;
    ok = std::fwrite(data.data(), 1, data.size(), f) == data.size() && ok;
    ok = std::fflush(f) == 0 && ok;
    ok = ::fsync(::fileno(f)) == 0 && ok;
    ok = std::fclose(f) == 0 && ok;
  }
  if (ok) std::filesystem::rename(temp, file, ec);
  if (!ok || ec) {
    std::filesystem::remove(temp, ec);
    warn("pipeline cache " + file.string() + ": could not be written; not saved");
  }
}

}  // namespace relpos::detail
