// Plan JSON: costmodel::plan_from_json (every field checked, errors name the field).
#include "costmodel/specs.h"
#include "fuzz/guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return stagecraft::fuzz::guarded_json(data, size, [](const nlohmann::json& j) { stagecraft::costmodel::plan_from_json(j); });
}
