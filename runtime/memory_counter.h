// Live bytes of CPU tensors, counted where LibTorch allocates them: an allocator that takes
// c10's CPU blocks (c10::alloc_cpu, 64-byte aligned) with a 64-byte header holding the block's
// size, so that counting costs two atomic additions and no lock, and can stay on in timed runs.
// Once installed (per process), every CPU tensor allocated afterwards is counted until freed;
// blocks allocated before stay with the default allocator, uncounted.
#pragma once

#include <cstdint>

namespace stagecraft::runtime {

// Installs the counter as LibTorch's CPU allocator; idempotent.
void install_cpu_memory_counter();
bool cpu_memory_counter_installed();
// Bytes in live counted CPU tensors now (their requested sizes, headers excluded), or -1 when
// the counter is not installed.
std::int64_t cpu_live_bytes();
// The largest cpu_live_bytes() since the last reset_cpu_peak() (or the installation), or -1.
std::int64_t cpu_peak_bytes();
// Starts a new peak from the bytes live now.
void reset_cpu_peak();

}  // namespace stagecraft::runtime
