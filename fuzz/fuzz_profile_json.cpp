// Profile JSON (stagecraft profile's output): costmodel::profile_from_json.
#include "costmodel/profile.h"
#include "fuzz/guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return stagecraft::fuzz::guarded_json(data, size, [](const nlohmann::json& j) { stagecraft::costmodel::profile_from_json(j); });
}
