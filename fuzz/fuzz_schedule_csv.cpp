// PyTorch's pipelining CSV format: schedules::from_csv (which validates what it imports).
#include "fuzz/guard.h"
#include "schedules/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return stagecraft::fuzz::guarded([&] { stagecraft::schedules::from_csv(stagecraft::fuzz::text_of(data, size)); });
}
