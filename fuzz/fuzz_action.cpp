// Schedule action text ("0F1", "1SEND_F2", ...): schedules::parse_action.
#include "fuzz/guard.h"
#include "schedules/action.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return stagecraft::fuzz::guarded([&] { stagecraft::schedules::parse_action(stagecraft::fuzz::text_of(data, size)); });
}
