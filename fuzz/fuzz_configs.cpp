// Frameworks' configs (configs/import.h): the first byte picks the format (Megatron-LM arguments,
// Bridge/NeMo YAML, torchtitan TOML, DeepSpeed JSON, Hugging Face JSON, or a training log for
// check-run), the rest is the file. Each parse ends in a model and plan or in InputError.
#include "configs/import.h"
#include "configs/run_log.h"
#include "fuzz/guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text = stagecraft::fuzz::text_of(data + 1, size - 1);
  return stagecraft::fuzz::guarded([&] {
    using stagecraft::configs::Format;
    const int pick = data[0] % 6;
    if (pick == 5) {
      const stagecraft::configs::RunLog log = stagecraft::configs::read_run_log(text, "log");
      stagecraft::configs::measure(log, 0, 8192, 8);
      return;
    }
    const Format formats[] = {Format::Megatron, Format::Bridge, Format::Torchtitan, Format::Deepspeed, Format::Hf};
    stagecraft::configs::ImportOptions o;
    o.gpus = 8;
    stagecraft::configs::Imported in = stagecraft::configs::import_text(text, formats[pick], o, "input");
    if (in.has_plan) stagecraft::configs::complete_plan(in, 8, "--gpus");
  });
}
