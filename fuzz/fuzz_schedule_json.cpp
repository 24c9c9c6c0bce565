// The project's schedule JSON: schedules::from_json.
#include "fuzz/guard.h"
#include "schedules/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return stagecraft::fuzz::guarded_json(data, size, [](const nlohmann::json& j) { stagecraft::schedules::from_json(j); });
}
