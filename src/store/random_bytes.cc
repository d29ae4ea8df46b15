#include "store/random_bytes.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/sha256.h"
#include "kolo/error.h"
#include "store/store.h"

namespace kolo::store {

void fill_random(std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t n = getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(std::string("getrandom failed: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

std::string make_secret() {
  std::array<std::uint8_t, 32> bytes;
  fill_random(bytes);
  return crypto::to_hex(bytes);
}

}  // namespace kolo::store
