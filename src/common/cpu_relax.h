// A hint to the CPU inside a spin-wait loop: the core slows the loop down and
// gives its sibling hyper-thread the pipeline, without giving up the core.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kolo {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace kolo
