// Reading Fashion-MNIST's IDX files (gzipped or not), without libtorch.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {

// A missing, unreadable or malformed dataset file; the message names the file.
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An IDX array of unsigned bytes: its dimensions and its elements in row-major order.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads an IDX file of unsigned bytes with `expected_rank` dimensions. Gzipped and
// plain files are both accepted. Throws DatasetError when the file is missing, the
// magic number is wrong, or the data is shorter or longer than the header says.
IdxArray read_idx(const std::string& path, int expected_rank);

// One split ("train" or "t10k"): images [N, 28, 28] and labels [N].
struct RawSplit {
  IdxArray images;
  IdxArray labels;
};

// Reads <dir>/<split>-images-idx3-ubyte and <dir>/<split>-labels-idx1-ubyte, each
// with or without a .gz suffix. Throws DatasetError when a file is missing or
// malformed, images are not 28x28, a label is not in 0..9, or the counts differ.
RawSplit read_split(const std::string& dir, const std::string& split);

}  // namespace fashion_mnist
