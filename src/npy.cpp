#include "relpos/npy.hpp"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <map>

#include "params/checks.hpp"
#include "relpos/error.hpp"
#include "relpos/half.hpp"

namespace relpos {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw InvalidArgument(path + ": not a readable .npy file: " + why);
}

// A value of a header as a message shows it: at most 40 characters.
std::string shown(const std::string& v) { return v.size() <= 40 ? v : v.substr(0, 37) + "..."; }

// The header's dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }: its
// values by key, as their source text (strings with their quotes). A key given twice keeps its
// last value, as Python's dict literal does; keys other than numpy's three are refused, as numpy
// refuses them. Parsed by hand, in one pass: a pattern matcher's backtracking recursed once per
// character and overflowed the stack on a long (legal) header.
std::map<std::string, std::string> header_dict(const std::string& path, const std::string& h) {
  std::size_t at = 0;
  auto skip = [&] {
    while (at < h.size() && (h[at] == ' ' || h[at] == '\t' || h[at] == '\n' || h[at] == '\r')) ++at;
  };
  auto expect = [&](char c) {
    skip();
    if (at >= h.size() || h[at] != c) bad(path, std::string("header is no dict literal (expected '") + c + "' at byte " + std::to_string(at) + ")");
    ++at;
  };
  // A quoted string, True, False or a parenthesised tuple (a shape holds no nested parentheses).
  auto token = [&]() -> std::string {
    skip();
    const std::size_t from = at;
    if (at < h.size() && (h[at] == '\'' || h[at] == '"')) {
      const std::size_t end = h.find(h[at], at + 1);
      if (end == std::string::npos) bad(path, "header has an unterminated string at byte " + std::to_string(from));
      at = end + 1;
    } else if (at < h.size() && h[at] == '(') {
      const std::size_t end = h.find(')', at);
      if (end == std::string::npos) bad(path, "header has an unterminated tuple at byte " + std::to_string(from));
      at = end + 1;
    } else {
      while (at < h.size() && std::isalpha(static_cast<unsigned char>(h[at]))) ++at;
      if (at == from) bad(path, "header has an unexpected character at byte " + std::to_string(from));
    }
    return h.substr(from, at - from);
  };
  std::map<std::string, std::string> dict;
  expect('{');
  for (;;) {
    skip();
    if (at < h.size() && h[at] == '}') break;
    const std::string key = token();
    if (key.size() < 2 || (key[0] != '\'' && key[0] != '"')) bad(path, "header key " + shown(key) + " is not a string");
    const std::string name = key.substr(1, key.size() - 2);
    if (name != "descr" && name != "fortran_order" && name != "shape")
      bad(path, "header key '" + shown(name) + "' is not one of numpy's (descr, fortran_order, shape)");
    expect(':');
    dict[name] = token();
    skip();
    if (at < h.size() && h[at] == ',') ++at;
    else if (at >= h.size() || h[at] != '}') bad(path, "header is no dict literal (expected ',' or '}' at byte " + std::to_string(at) + ")");
  }
  return dict;
}

std::uint32_t descr_size(std::string_view d) {
  if (d == "|u1" || d == "<u1") return 1;  // byte arrays: raw cache rows (relpos run with --kv-dtype)
  if (d == "<f2" || d == "<u2") return 2;
  if (d == "<f4" || d == "<i4") return 4;
  if (d == "<f8" || d == "<i8") return 8;
  return 0;
}

// The largest element count a file may declare: 2^40 elements (8 TiB of float64) keeps every
// byte count below 2^64 and far beyond any real tensor.
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;

// The dimensions of a header's shape tuple, e.g. "(2, 3)", "(3,)" or "()".
std::vector<std::uint64_t> parse_shape(const std::string& path, const std::string& tuple) {
  std::vector<std::uint64_t> dims;
  const std::string inner = tuple.substr(1, tuple.size() - 2);
  std::size_t start = 0;
  while (start < inner.size()) {
    std::size_t end = inner.find(',', start);
    if (end == std::string::npos) end = inner.size();
    std::string item = inner.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    start = end + 1;
    if (item.empty() && end == inner.size() && !dims.empty()) break;  // the trailing comma of "(3,)"
    std::uint64_t d = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    if (!item.empty() && item[0] == '-') bad(path, "negative dimension " + shown(item) + " in shape " + shown(tuple));
    if (ec == std::errc::result_out_of_range) bad(path, "dimension " + shown(item) + " in shape " + shown(tuple) + " does not fit 64 bits");
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      bad(path, "dimension '" + shown(item) + "' in shape " + shown(tuple) + " is not a whole number");
    dims.push_back(d);
  }
  return dims;
}

// The bytes left between the stream's position and the end of the file, or nullopt when the
// stream cannot seek (a pipe).
std::optional<std::uint64_t> bytes_left(std::ifstream& f) {
  const std::streampos here = f.tellg();
  if (here == std::streampos(-1) || !f.seekg(0, std::ios::end)) {
    f.clear();
    return std::nullopt;
  }
  const std::streampos end = f.tellg();
  f.seekg(here);
  if (end == std::streampos(-1) || !f) {
    f.clear();
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(end - here);
}

// Reads exactly `bytes` bytes. The buffer grows with what actually arrives (64 MiB at a time), so
// a header that claims more data than a pipe delivers never allocates the claimed size.
void read_data(std::ifstream& f, const std::string& path, const std::string& tuple, std::uint64_t bytes, std::vector<unsigned char>& out) {
  constexpr std::uint64_t kChunk = std::uint64_t{64} << 20;
  while (out.size() < bytes) {
    const std::uint64_t have = out.size(), step = std::min(kChunk, bytes - have);
    out.resize(have + step);
    if (!f.read(reinterpret_cast<char*>(out.data() + have), static_cast<std::streamsize>(step)))
      bad(path, "data truncated: shape " + shown(tuple) + " needs " + std::to_string(bytes) + " bytes, the file holds " +
                    std::to_string(have + static_cast<std::uint64_t>(f.gcount())));
  }
}

}  // namespace

std::uint64_t NpyArray::elements() const {
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d != 0 && n > kMaxElements / d) throw InvalidArgument("npy shape: the element count exceeds 2^40");
    n *= d;
  }
  return n;
}

namespace {
// The element count, after checking that `bytes` holds exactly that many elements of `size` bytes.
std::uint64_t checked_count(const NpyArray& a, std::uint32_t size, const std::string& name) {
  const std::uint64_t n = a.elements();
  if (a.bytes.size() != n * size)
    throw InvalidArgument(name + ": holds " + std::to_string(a.bytes.size()) + " bytes, its shape needs " + std::to_string(n * size));
  return n;
}
}  // namespace

std::vector<float> NpyArray::to_f32(const std::string& name) const {
  if (descr != "<f4" && descr != "<f2" && descr != "<f8")
    throw InvalidArgument(name + ": dtype " + descr + " is not a float array (expected float16, float32 or float64)");
  const std::uint64_t n = checked_count(*this, descr_size(descr), name);
  std::vector<float> out(n);
  if (n == 0) return out;
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
      // A finite value past float32's range would become an infinity, which every op and the plot
      // read as something else (a masked entry, an invalid one): refused instead.
      out[i] = static_cast<float>(d);
      if (std::isinf(out[i]) && std::isfinite(d))
        throw InvalidArgument(name + ": element " + std::to_string(i) + " = " + detail::number_text(d) +
                              " is finite but beyond float32's range (+-3.4e38), which relpos reads it in");
    }
  }
  return out;
}

std::vector<std::int32_t> NpyArray::to_i32(const std::string& name) const {
  if (descr != "<i4" && descr != "<i8")
    throw InvalidArgument(name + ": dtype " + descr + " is not an integer array (expected int32 or int64)");
  const std::uint64_t n = checked_count(*this, descr_size(descr), name);
  std::vector<std::int32_t> out(n);
  if (n == 0) return out;
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
  std::map<std::string, std::string> dict = header_dict(path, header);
  const std::string descr = dict["descr"], order = dict["fortran_order"], shape = dict["shape"];
  if (descr.size() < 2 || (descr[0] != '\'' && descr[0] != '"') || (order != "True" && order != "False") || shape.empty() || shape[0] != '(')
    bad(path, "header lacks a descr string, a fortran_order of True or False, or a shape tuple");
  a.descr = descr.substr(1, descr.size() - 2);
  if (a.descr.size() >= 1 && a.descr[0] == '|') a.descr[0] = '<';  // single-byte types have no order
  if (order != "False") bad(path, "Fortran-ordered arrays are not supported (use numpy.ascontiguousarray)");
  if (descr_size(a.descr) == 0)
    bad(path, "dtype '" + shown(a.descr) + "' is not supported (little-endian float16/32/64, int32/64, uint8 or uint16 only)");
  a.shape = parse_shape(path, shape);
  std::uint64_t n = 1;
  for (auto d : a.shape) {
    if (d != 0 && n > kMaxElements / d) bad(path, "shape " + shown(shape) + " has more than 2^40 elements");
    n *= d;
  }
  const std::uint64_t bytes = n * descr_size(a.descr);
  // Checked against the file before anything is allocated: a small file claiming a huge shape
  // fails here, not after allocating the claimed size.
  if (const auto left = bytes_left(f)) {
    if (*left < bytes)
      bad(path, "data truncated: shape " + shown(shape) + " needs " + std::to_string(bytes) + " bytes, the file holds " + std::to_string(*left));
    if (*left > bytes)
      bad(path, std::to_string(*left - bytes) + " bytes after the data of shape " + shown(shape) + " (" + std::to_string(bytes) + " bytes)");
  }
  read_data(f, path, shape, bytes, a.bytes);
  return a;
}

void write_npy(const std::string& path, DType dtype, std::span<const std::uint64_t> shape, const void* data) {
  detail::require_one_of(dtype, {DType::F32, DType::F16, DType::BF16, DType::I32}, "dtype", "must be f32, f16, bf16 or i32");
  // bf16 as its uint16 bit patterns (numpy has no bfloat16).
  write_npy(path, dtype == DType::F32 ? "<f4" : dtype == DType::F16 ? "<f2" : dtype == DType::BF16 ? "<u2" : "<i4", shape, data);
}

void write_npy(const std::string& path, std::string_view element, std::span<const std::uint64_t> shape, const void* data) {
  const std::string descr(element);
  const std::uint32_t size = descr_size(descr);
  if (size == 0) throw InvalidArgument(path + ": cannot write elements of numpy type " + descr);
  std::string dims;
  std::uint64_t n = 1;
  for (auto d : shape) {
    dims += std::to_string(d) + ", ";
    if (d != 0 && n > kMaxElements / d) throw InvalidArgument(path + ": shape has more than 2^40 elements");
    n *= d;
  }
  // numpy writes "(2, 3)", "(3,)" and "()"
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff) throw InvalidArgument(path + ": " + std::to_string(shape.size()) + " dimensions do not fit a version 1 header");
  // stdio rather than a stream: every failing call (open, each write, the final flush in fclose)
  // sets errno, so the message can say why (a full disk, a read-only file system).
  const auto fail = [&](const char* what) { throw Error(path + ": " + what + ": " + std::strerror(errno)); };
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) throw InvalidArgument(path + ": cannot open for writing: " + std::strerror(errno));
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  const unsigned char l[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  const std::uint64_t bytes = n * size;
  if (std::fwrite("\x93NUMPY\x01\x00", 1, 8, f.get()) != 8 || std::fwrite(l, 1, 2, f.get()) != 2 ||
      std::fwrite(header.data(), 1, header.size(), f.get()) != header.size() ||
      (bytes && std::fwrite(data, 1, bytes, f.get()) != bytes))
    fail("write failed");
  if (std::fclose(f.release()) != 0) fail("write failed");
}

}  // namespace relpos
