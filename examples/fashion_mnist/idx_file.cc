#include "idx_file.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <type_traits>

namespace fashion_mnist {
namespace {

constexpr std::uint8_t kUnsignedByteType = 0x08;
// Far above Fashion-MNIST's 47 MB; bounds what a corrupt header can make us allocate.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 31;

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to `size` bytes; fewer only at the end of the file. gzread passes plain
// files through unchanged, so one path serves both forms.
std::size_t read_some(gzFile file, void* out, std::size_t size, const std::string& path) {
  std::size_t done = 0;
  auto* bytes = static_cast<std::uint8_t*>(out);
  while (done < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(size - done, INT_MAX / 2));
    const int got = gzread(file, bytes + done, chunk);
    if (got < 0) {
      int code = 0;
      throw DatasetError(path + ": cannot read (" + gzerror(file, &code) + ")");
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

std::uint32_t big_endian(const std::uint8_t* bytes) {
  return std::uint32_t{bytes[0]} << 24 | std::uint32_t{bytes[1]} << 16 | std::uint32_t{bytes[2]} << 8 | bytes[3];
}

std::string locate(const std::string& dir, const std::string& name) {
  const std::filesystem::path plain = std::filesystem::path(dir) / name;
  if (std::filesystem::exists(plain)) return plain.string();
  const std::filesystem::path gz = plain.string() + ".gz";
  if (std::filesystem::exists(gz)) return gz.string();
  throw DatasetError("missing dataset file " + gz.string() + " (or " + plain.string() +
                     "): install dataset-fashion-mnist or pass --data-dir");
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw DatasetError(path + ": cannot open");

  std::uint8_t magic[4];
  if (read_some(file.get(), magic, 4, path) != 4) throw DatasetError(path + ": truncated before the IDX header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != kUnsignedByteType || magic[3] != expected_rank) {
    char found[16];
    std::snprintf(found, sizeof found, "%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
    char wanted[16];
    std::snprintf(wanted, sizeof wanted, "000008%02x", static_cast<unsigned>(expected_rank));
    throw DatasetError(path + ": bad magic number 0x" + found + ", expected 0x" + wanted +
                       " (an IDX file of unsigned bytes with " + std::to_string(expected_rank) + " dimensions)");
  }

  IdxArray array;
  std::int64_t elements = 1;
  for (int d = 0; d < expected_rank; ++d) {
    std::uint8_t size_bytes[4];
    if (read_some(file.get(), size_bytes, 4, path) != 4) throw DatasetError(path + ": truncated inside the header");
    const std::int64_t extent = big_endian(size_bytes);
    elements *= extent;
    if (elements > kMaxElements) throw DatasetError(path + ": header declares an implausibly large array");
    array.dims.push_back(extent);
  }

  array.data.resize(static_cast<std::size_t>(elements));
  const std::size_t got = read_some(file.get(), array.data.data(), array.data.size(), path);
  if (got != array.data.size()) {
    throw DatasetError(path + ": truncated: the header declares " + std::to_string(elements) +
                       " bytes of data, the file has " + std::to_string(got));
  }
  std::uint8_t extra;
  if (read_some(file.get(), &extra, 1, path) != 0) {
    throw DatasetError(path + ": longer than its header declares (" + std::to_string(elements) + " bytes of data)");
  }
  return array;
}

RawSplit read_split(const std::string& dir, const std::string& split) {
  const std::string images_path = locate(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = locate(dir, split + "-labels-idx1-ubyte");
  RawSplit raw{read_idx(images_path, 3), read_idx(labels_path, 1)};
  if (raw.images.dims[1] != 28 || raw.images.dims[2] != 28) {
    throw DatasetError(images_path + ": images are " + std::to_string(raw.images.dims[1]) + "x" +
                       std::to_string(raw.images.dims[2]) + ", expected 28x28");
  }
  if (raw.images.dims[0] != raw.labels.dims[0]) {
    throw DatasetError("count mismatch: " + images_path + " holds " + std::to_string(raw.images.dims[0]) +
                       " images but " + labels_path + " holds " + std::to_string(raw.labels.dims[0]) + " labels");
  }
  const auto bad = std::find_if(raw.labels.data.begin(), raw.labels.data.end(), [](std::uint8_t l) { return l > 9; });
  if (bad != raw.labels.data.end()) {
    throw DatasetError(labels_path + ": label " + std::to_string(*bad) + " at index " +
                       std::to_string(bad - raw.labels.data.begin()) + " is not a class in 0..9");
  }
  return raw;
}

}  // namespace fashion_mnist
