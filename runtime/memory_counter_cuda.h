// The CUDA side of the memory counter (memory_counter.h), for memory_counter.cpp: its ledger
// and the retagging of a GPU tensor. Without CUDA in the build, nothing is ever counted.
#pragma once

#include "runtime/memory_ledger.h"

namespace at {
class Tensor;
}

namespace stagecraft::runtime::cuda_counter {

Ledger& ledger();
bool installed();
// Moves the block behind a CUDA tensor's storage to `c`, when the counter booked it.
void retag(const at::Tensor& t, MemCategory c);

}  // namespace stagecraft::runtime::cuda_counter
