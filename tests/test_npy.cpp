#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

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
  auto expect_error = [](const std::string& path, const std::string& word) {
    try {
      read_npy(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
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
