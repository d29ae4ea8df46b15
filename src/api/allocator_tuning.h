// Tunes glibc's allocator for training at kolo::init() (KOLO_TUNE_MALLOC=0 turns
// it off).
//
// A training step frees and reallocates the same large buffers (activations,
// gradients, fusion copies) every iteration. glibc serves blocks above its mmap
// threshold (128 KiB at start, adjusted as it goes) with fresh mmaps and returns
// the top of the heap past its trim threshold, so each step faults those pages in
// and zeroes them again: in a libtorch ResNet-50 worker that is a third of its
// time spent in the kernel, and two workers fight over memory bandwidth for it.
// Keeping blocks up to 32 MiB on the heap (glibc's maximum for the threshold)
// and not trimming below 1 GiB makes the pages stay mapped.
// kolorun also asks glibc for transparent huge pages in the ranks (a tunable
// read at a process's start: tools/kolorun/plan/rank_environment.cc).
#pragma once

namespace kolo::detail {

// Applies the tuning once per process unless KOLO_TUNE_MALLOC is 0. Returns
// whether it is in effect.
bool tune_allocator_for_training();

}  // namespace kolo::detail
