#include "relpos/npy.hpp"

#include <cstring>
#include <fstream>
#include <limits>
#include <regex>

#include "relpos/error.hpp"
#include "relpos/half.hpp"

namespace relpos {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw InvalidArgument(path + ": not a readable .npy file: " + why);
}

std::string dict_value(const std::string& header, const std::string& key) {
  const std::regex re("'" + key + "'\\s*:\\s*('[^']*'|True|False|\\([^)]*\\))");
  std::smatch m;
  if (!std::regex_search(header, m, re)) return {};
  return m[1].str();
}

std::uint32_t descr_size(const std::string& d) {
  if (d.size() < 3) return 0;
  return static_cast<std::uint32_t>(std::stoul(d.substr(2)));
}

}  // namespace

std::uint64_t NpyArray::elements() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<float> NpyArray::to_f32(const std::string& name) const {
  const std::uint64_t n = elements();
  std::vector<float> out(n);
  if (descr == "<f4") {
    std::memcpy(out.data(), bytes.data(), n * 4);
  } else if (descr == "<f2") {
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  } else if (descr == "<f8") {
    for (std::uint64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, bytes.data() + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {
    throw InvalidArgument(name + ": dtype " + descr + " is not a float array (expected float16, float32 or float64)");
  }
  return out;
}

std::vector<std::int32_t> NpyArray::to_i32(const std::string& name) const {
  const std::uint64_t n = elements();
  std::vector<std::int32_t> out(n);
  if (descr == "<i4") {
    std::memcpy(out.data(), bytes.data(), n * 4);
  } else if (descr == "<i8") {
    for (std::uint64_t i = 0; i < n; ++i) {
      std::int64_t v;
      std::memcpy(&v, bytes.data() + 8 * i, 8);
      if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
        throw InvalidArgument(name + ": value " + std::to_string(v) + " at index " + std::to_string(i) + " does not fit int32");
      out[i] = static_cast<std::int32_t>(v);
    }
  } else {
    throw InvalidArgument(name + ": dtype " + descr + " is not an integer array (expected int32 or int64)");
  }
  return out;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument(path + ": cannot open for reading");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(path, "missing the \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_len = 0;
  if (major == 1) {
    unsigned char l[2];
    if (!f.read(reinterpret_cast<char*>(l), 2)) bad(path, "truncated header");
    header_len = l[0] | (l[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char l[4];
    if (!f.read(reinterpret_cast<char*>(l), 4)) bad(path, "truncated header");
    header_len = l[0] | (l[1] << 8) | (l[2] << 16) | (static_cast<std::uint32_t>(l[3]) << 24);
  } else {
    bad(path, "unsupported format version " + std::to_string(major));
  }
  if (header_len > (1u << 20)) bad(path, "header of " + std::to_string(header_len) + " bytes");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) bad(path, "truncated header");

  NpyArray a;
  std::string descr = dict_value(header, "descr"), order = dict_value(header, "fortran_order"), shape = dict_value(header, "shape");
  if (descr.size() < 2 || order.empty() || shape.empty()) bad(path, "header lacks descr, fortran_order or shape");
  a.descr = descr.substr(1, descr.size() - 2);
  if (a.descr.size() >= 1 && a.descr[0] == '|') a.descr[0] = '<';  // single-byte types have no order
  if (order != "False") bad(path, "Fortran-ordered arrays are not supported (use numpy.ascontiguousarray)");
  static const std::regex known("<(f2|f4|f8|i4|i8)");
  if (!std::regex_match(a.descr, known))
    bad(path, "dtype '" + a.descr + "' is not supported (little-endian float16/32/64 or int32/64 only)");
  const std::regex dim("(\\d+)");
  for (auto it = std::sregex_iterator(shape.begin(), shape.end(), dim); it != std::sregex_iterator(); ++it)
    a.shape.push_back(std::stoull((*it)[1].str()));
  std::uint64_t n = 1;
  for (auto d : a.shape) {
    if (d != 0 && n > (std::uint64_t{1} << 40) / d) bad(path, "shape too large");
    n *= d;
  }
  const std::uint64_t bytes = n * descr_size(a.descr);
  a.bytes.resize(bytes);
  if (bytes && !f.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(bytes)))
    bad(path, "data truncated: expected " + std::to_string(bytes) + " bytes for shape " + shape);
  return a;
}

void write_npy(const std::string& path, DType dtype, std::span<const std::uint64_t> shape, const void* data) {
  std::string descr = dtype == DType::F32 ? "<f4" : dtype == DType::F16 ? "<f2" : "<i4";
  std::string dims;
  std::uint64_t n = 1;
  for (auto d : shape) {
    dims += std::to_string(d) + ", ";
    n *= d;
  }
  // numpy writes "(2, 3)", "(3,)" and "()"
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument(path + ": cannot open for writing");
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  const unsigned char l[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  f.write(reinterpret_cast<const char*>(l), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * dtype_size(dtype)));
  if (!f) throw Error(path + ": write failed");
}

}  // namespace relpos
