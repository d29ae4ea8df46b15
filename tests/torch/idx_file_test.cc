// The Fashion-MNIST example's IDX reader: good files in both forms, and every kind
// of bad file gives a DatasetError that names the problem.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "idx_file.h"

namespace {

using fashion_mnist::DatasetError;
using fashion_mnist::read_idx;
using fashion_mnist::read_split;
using Bytes = std::vector<std::uint8_t>;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kolo-idx-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Bytes idx(const std::vector<std::uint32_t>& dims, std::size_t data_bytes, std::uint8_t fill = 1) {
  Bytes bytes = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  bytes.insert(bytes.end(), data_bytes, fill);
  return bytes;
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(file);
}

void expect_error(const std::string& path, int rank, const std::string& fragment) {
  try {
    read_idx(path, rank);
    ADD_FAILURE() << "accepted " << path;
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(IdxFileTest, ReadsPlainAndGzippedFiles) {
  TempDir dir;
  Bytes bytes = idx({2, 3, 4}, 24, 7);
  write_plain(dir.file("plain"), bytes);
  write_gz(dir.file("packed.gz"), bytes);
  for (const char* name : {"plain", "packed.gz"}) {
    auto array = read_idx(dir.file(name), 3);
    EXPECT_EQ(array.dims, (std::vector<std::int64_t>{2, 3, 4})) << name;
    EXPECT_EQ(array.data, Bytes(24, 7)) << name;
  }
}

TEST(IdxFileTest, MalformedFilesAreClearErrors) {
  TempDir dir;
  Bytes bad_magic = idx({4}, 4);
  bad_magic[2] = 0x0d;  // float data, not unsigned bytes
  write_plain(dir.file("bad_magic"), bad_magic);
  expect_error(dir.file("bad_magic"), 1, "bad magic number 0x00000d01");

  write_plain(dir.file("wrong_rank"), idx({2, 2}, 4));
  expect_error(dir.file("wrong_rank"), 1, "bad magic number");

  write_gz(dir.file("truncated.gz"), idx({10, 28, 28}, 28 * 28 * 10 - 5));
  expect_error(dir.file("truncated.gz"), 3, "truncated: the header declares 7840 bytes of data, the file has 7835");

  Bytes short_header = idx({10, 28, 28}, 0);
  short_header.resize(9);
  write_plain(dir.file("short_header"), short_header);
  expect_error(dir.file("short_header"), 3, "truncated inside the header");

  write_plain(dir.file("empty"), {});
  expect_error(dir.file("empty"), 1, "truncated before the IDX header");

  write_plain(dir.file("long"), idx({3}, 4));
  expect_error(dir.file("long"), 1, "longer than its header declares");

  write_plain(dir.file("huge"), idx({0xffffffffu, 0xffffffffu, 2}, 0));
  expect_error(dir.file("huge"), 3, "implausibly large");

  Bytes corrupt = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  write_plain(dir.file("corrupt.gz"), corrupt);
  expect_error(dir.file("corrupt.gz"), 1, "corrupt.gz");

  expect_error(dir.file("absent"), 1, "cannot open");
}

void write_split(const TempDir& dir, const std::string& split, std::uint32_t images, std::uint32_t labels,
                 std::uint32_t side = 28, std::uint8_t label = 3) {
  write_gz(dir.file(split + "-images-idx3-ubyte.gz"), idx({images, side, side}, images * side * side));
  write_plain(dir.file(split + "-labels-idx1-ubyte"), idx({labels}, labels, label));
}

void expect_split_error(const TempDir& dir, const std::string& split, const std::string& fragment) {
  try {
    read_split(dir.path(), split);
    ADD_FAILURE() << "accepted split " << split;
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(IdxFileTest, SplitsAreChecked) {
  TempDir dir;
  write_split(dir, "good", 5, 5);
  auto split = read_split(dir.path(), "good");
  EXPECT_EQ(split.images.dims, (std::vector<std::int64_t>{5, 28, 28}));
  EXPECT_EQ(split.labels.data, Bytes(5, 3));

  write_split(dir, "mismatch", 5, 4);
  expect_split_error(dir, "mismatch", "count mismatch");
  write_split(dir, "small", 5, 5, 14);
  expect_split_error(dir, "small", "images are 14x14, expected 28x28");
  write_split(dir, "labels", 5, 5, 28, 10);
  expect_split_error(dir, "labels", "label 10 at index 0 is not a class");
  expect_split_error(dir, "absent", "missing dataset file");
}

}  // namespace
