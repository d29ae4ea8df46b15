// Random bytes from the kernel (getrandom), for handshake nonces and job secrets.
#pragma once

#include <cstdint>
#include <span>

namespace kolo::store {

// Throws kolo::Error if the kernel cannot provide them.
void fill_random(std::span<std::uint8_t> out);

}  // namespace kolo::store
