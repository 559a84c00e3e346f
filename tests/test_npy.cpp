#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>

#include "support/expect.hpp"

using namespace relpos;

namespace {
std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / ("relpos_npy_" + name)).string(); }

void write_raw(const std::string& path, const std::string& header, std::size_t data_bytes) {
  std::ofstream f(path, std::ios::binary);
  std::string h = header;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  f.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
  f.write(len, 2);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::string zeros(data_bytes, '\0');
  f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}
// read_npy refuses the file with a message that holds `word`, of bounded length (a long value in
// a header is cut short).
void expect_error(const std::string& path, const std::string& word) {
  try {
    read_npy(path);
    ADD_FAILURE() << path << " was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 400u) << "a message of bounded length";
  }
}
}  // namespace

TEST(Npy, RoundTripsEachDtype) {
  std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1.0f};
  std::vector<std::uint64_t> shape = {2, 3};
  write_npy(temp("f32.npy"), DType::F32, shape, f.data());
  auto a = read_npy(temp("f32.npy"));
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.to_f32("x"), f);

  auto h = to_half(f);
  write_npy(temp("f16.npy"), DType::F16, shape, h.data());
  EXPECT_EQ(read_npy(temp("f16.npy")).to_f32("x"), f);

  std::vector<std::int32_t> i = {1, -2, 3};
  std::vector<std::uint64_t> shape1 = {3};
  write_npy(temp("i32.npy"), DType::I32, shape1, i.data());
  auto b = read_npy(temp("i32.npy"));
  EXPECT_EQ(b.shape, shape1);
  EXPECT_EQ(b.to_i32("x"), i);
  EXPECT_THROW(b.to_f32("x"), InvalidArgument);
}

TEST(Npy, HeaderIsWhatNumpyWrites) {
  std::vector<std::uint64_t> shape = {3};
  float v[3] = {0, 0, 0};
  write_npy(temp("hdr.npy"), DType::F32, shape, v);
  std::ifstream f(temp("hdr.npy"), std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(all.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
  EXPECT_EQ((all.size() - 12) % 4, 0u);
  EXPECT_EQ((all.find('\n') + 1) % 64, 0u);  // header padded to a multiple of 64 bytes, as numpy does
}

TEST(Npy, ReadsFloat64AndInt64) {
  write_raw(temp("f8.npy"), "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", 32);
  auto a = read_npy(temp("f8.npy"));
  EXPECT_EQ(a.to_f32("x"), std::vector<float>(4, 0.0f));
  write_raw(temp("i8.npy"), "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 8);
  EXPECT_EQ(read_npy(temp("i8.npy")).to_i32("x"), std::vector<std::int32_t>(1, 0));
}

TEST(Npy, BadFilesGiveClearErrors) {
  expect_error(temp("missing.npy"), "cannot open");
  { std::ofstream(temp("garbage.npy")) << "hello world, not numpy"; }
  expect_error(temp("garbage.npy"), "magic");
  write_raw(temp("fortran.npy"), "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
  expect_error(temp("fortran.npy"), "Fortran");
  write_raw(temp("bigendian.npy"), "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8);
  expect_error(temp("bigendian.npy"), "dtype");
  write_raw(temp("short.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }", 8);
  expect_error(temp("short.npy"), "truncated");
  write_raw(temp("complex.npy"), "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8);
  expect_error(temp("complex.npy"), "dtype");
}

// The header is the dict literal numpy writes, read as Python reads it: any spacing (a legal header
// of 60,000 spaces overflowed the stack of the pattern matcher that parsed it before), either
// quote, a key given twice taking its last value; keys numpy does not write are refused, and a
// message shows a long value cut short.
TEST(Npy, HeaderIsReadAsPythonReadsItsDictLiteral) {
  write_raw(temp("spaces.npy"), "{'descr':" + std::string(60000, ' ') + "'<f4', 'fortran_order': False, 'shape': (2,), }", 8);
  EXPECT_EQ(read_npy(temp("spaces.npy")).shape, (std::vector<std::uint64_t>{2}));
  write_raw(temp("quotes.npy"), "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1, 3)}", 12);
  EXPECT_EQ(read_npy(temp("quotes.npy")).shape, (std::vector<std::uint64_t>{1, 3}));
  write_raw(temp("twice.npy"), "{'fortran_order': False, 'descr': '<f4', 'shape': (2, 2), 'fortran_order': True, }", 16);
  expect_error(temp("twice.npy"), "Fortran");
  write_raw(temp("extra.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'note': 'descr', }", 8);
  expect_error(temp("extra.npy"), "'note' is not one of numpy's");
  write_raw(temp("longdescr.npy"), "{'descr': '<f4" + std::string(50000, 'x') + "', 'fortran_order': False, 'shape': (2,), }", 8);
  expect_error(temp("longdescr.npy"), "is not supported");
  write_raw(temp("longshape.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2" + std::string(50000, ' ') + "x), }", 8);
  expect_error(temp("longshape.npy"), "not a whole number");
  write_raw(temp("open.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, ", 8);
  expect_error(temp("open.npy"), "unterminated tuple");
  write_raw(temp("nodict.npy"), "'descr': '<f4'", 8);
  expect_error(temp("nodict.npy"), "no dict literal");
  write_raw(temp("nodescr.npy"), "{'descr': True, 'fortran_order': False, 'shape': (2,), }", 8);
  expect_error(temp("nodescr.npy"), "lacks a descr string");
  write_raw(temp("order.npy"), "{'descr': '<f4', 'fortran_order': 'False', 'shape': (2,), }", 8);
  expect_error(temp("order.npy"), "a fortran_order of True or False");
  write_raw(temp("shortdata.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2" + std::string(50000, ' ') + "), }", 4);
  expect_error(temp("shortdata.npy"), "data truncated");
}

// The header's shape is checked against the file before anything is allocated: a small file
// claiming a huge array fails at once (a 1 TiB claim would otherwise throw bad_alloc or abort).
TEST(Npy, HugeShapeInASmallFileFailsBeforeAllocating) {
  auto expect_truncated = [](const std::string& shape, const std::string& needs) {
    write_raw(temp("huge.npy"), "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }", 1024);
    try {
      read_npy(temp("huge.npy"));
      ADD_FAILURE() << shape << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("needs " + needs + " bytes, the file holds 1024"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(temp("huge.npy")), std::string::npos) << e.what();
    }
  };
  expect_truncated("(2147483648,)", "17179869184");           // 16 GiB
  expect_truncated("(1024, 1024, 1024, 128)", "1099511627776");  // 1 TiB
}

TEST(Npy, ShapesThatAreNotCountsAreRejected) {
  auto expect_error = [](const std::string& shape, std::size_t data, const std::string& word) {
    write_raw(temp("shape.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", data);
    try {
      const NpyArray a = read_npy(temp("shape.npy"));
      ADD_FAILURE() << shape << " was accepted as " << a.shape.size() << " dimension(s)";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << shape << ": " << e.what();
    }
  };
  expect_error("(-3, 4)", 48, "negative dimension -3");           // was read as (3, 4)
  expect_error("(3, -4)", 48, "negative dimension -4");
  expect_error("(2.5,)", 40, "'2.5'");                            // was read as (2, 5)
  expect_error("(99999999999999999999999,)", 8, "does not fit");  // std::stoull threw out_of_range
  expect_error("(4294967296, 4294967296)", 8, "2^40");            // the element count overflows
  expect_error("(2,)", 12, "4 bytes after the data");             // trailing bytes: not what numpy writes
  // What numpy writes for 0-d, 1-d and empty arrays still reads.
  write_raw(temp("ok.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 0);
  EXPECT_EQ(read_npy(temp("ok.npy")).shape, (std::vector<std::uint64_t>{0, 3}));
  EXPECT_TRUE(read_npy(temp("ok.npy")).to_f32("x").empty());
  write_raw(temp("ok.npy"), "{'descr': '<i4', 'fortran_order': False, 'shape': (3, ), }", 12);
  EXPECT_EQ(read_npy(temp("ok.npy")).to_i32("x"), std::vector<std::int32_t>(3, 0));
}

// An NpyArray built by hand whose bytes do not match its shape is refused, not overread.
TEST(Npy, ConversionChecksTheBytesAgainstTheShape) {
  NpyArray a;
  a.descr = "<f4";
  a.shape = {4};
  EXPECT_THROW(a.to_f32("a"), InvalidArgument);
  a.descr = "<i4";
  EXPECT_THROW(a.to_i32("a"), InvalidArgument);
  a.bytes.resize(16);
  EXPECT_EQ(a.to_i32("a"), std::vector<std::int32_t>(4, 0));
}

// A finite float64 past float32's range would read as an infinity (a masked bias entry, an invalid
// plot cell): refused, naming the element. Infinities, NaN and values that round to float32's
// largest stay as they are.
TEST(Npy, Float64BeyondFloat32IsRefusedNotMadeInfinite) {
  NpyArray a;
  a.descr = "<f8";
  a.shape = {4};
  const double inf = std::numeric_limits<double>::infinity();
  auto with = [&](std::vector<double> v) {
    a.bytes.resize(v.size() * 8);
    std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a.to_f32("values.npy");
  };
  const std::vector<float> kept = with({-inf, inf, 1.0, 3.4028234663852886e38});
  EXPECT_EQ(kept[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(kept[3], std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isnan(with({std::nan(""), 0.0, 0.0, 0.0})[0]));
  relpos::test::expect_invalid([&] { with({0.0, 0.0, -1e300, 0.0}); }, "values.npy: element 2 = -1e+300 is finite but beyond float32's range");
  relpos::test::expect_invalid([&] { with({3.5e38, 0.0, 0.0, 0.0}); }, "element 0 = 3.5e+38");
}

// Every write is checked, the final flush included: a full disk is an error naming the path.
TEST(Npy, WriteFailuresAreErrorsNamingThePath) {
  const std::vector<float> v(4096, 1.0f);
  const std::vector<std::uint64_t> shape = {4096};
  try {
    write_npy("/dev/full", DType::F32, shape, v.data());
    ADD_FAILURE() << "writing to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
  const std::vector<std::uint64_t> small = {1};
  try {
    write_npy("/dev/full", DType::F32, small, v.data());  // small enough to sit in the buffer until the close
    ADD_FAILURE() << "writing to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_npy(temp("no_such_dir/x.npy"), DType::F32, small, v.data()), InvalidArgument);
}
