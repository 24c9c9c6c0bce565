#include "configs/run_log.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

// The number after `label` in `line` (commas removed), or none.
std::optional<double> number_after(const std::string& line, const std::string& label) {
  const size_t at = line.find(label);
  if (at == std::string::npos) return std::nullopt;
  size_t i = at + label.size();
  while (i < line.size() && (line[i] == ' ' || line[i] == ':')) ++i;
  std::string digits;
  while (i < line.size() && (std::isdigit(static_cast<unsigned char>(line[i])) || line[i] == '.' || line[i] == ',' || line[i] == 'E' ||
                             line[i] == 'e' || line[i] == '-' || line[i] == '+'))
    if (line[i++] != ',') digits += line[i - 1];
  try {
    const double v = std::stod(digits);
    if (std::isfinite(v) && v >= 0 && v < 1e15) return v;  // logged times, counts and rates
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// A logged iteration or rank number as an int (0 past the range of one).
int whole(double v) { return v < 1e9 ? static_cast<int>(v) : 0; }

bool megatron_line(const std::string& line, RunLog& log) {
  const std::optional<double> ms = number_after(line, "elapsed time per iteration (ms)");
  const std::optional<double> it = number_after(line, " iteration ");
  if (!ms || !it || *ms <= 0) return false;
  RunSample s;
  s.iteration = whole(*it);
  s.iteration_s = *ms / 1000;
  s.tflops_per_gpu = number_after(line, "throughput per GPU (TFLOP/s/GPU)").value_or(0);
  log.samples.push_back(s);
  log.format = "megatron";
  return true;
}

bool megatron_memory(const std::string& line, RunLog& log) {
  const std::optional<double> mb = number_after(line, "| max allocated");
  if (!mb || line.find("memory (MB)") == std::string::npos) return false;
  static const std::regex rank(R"(\[Rank (\d+)\])");
  std::smatch m;
  const size_t r = std::regex_search(line, m, rank) && m[1].length() < 6 ? std::stoul(m[1]) : 0;  // ranks below 10^6
  if (log.rank_max_allocated_bytes.size() <= r) log.rank_max_allocated_bytes.resize(r + 1, 0);
  log.rank_max_allocated_bytes[r] = *mb * 1024 * 1024;
  return true;
}

bool nemo_line(const std::string& line, RunLog& log) {
  const std::optional<double> t = number_after(line, "train_step_timing in s");
  if (!t || *t <= 0) return false;
  RunSample s;
  s.iteration = whole(number_after(line, "global_step").value_or(static_cast<double>(log.samples.size())));
  s.iteration_s = *t;
  log.samples.push_back(s);
  log.format = "nemo";
  return true;
}

bool torchtitan_line(const std::string& line, RunLog& log) {
  const std::optional<double> step = number_after(line, "step:");
  const std::optional<double> tps = number_after(line, "tps:");
  if (!step || !tps || *tps <= 0) return false;
  RunSample s;
  s.iteration = whole(*step);
  s.tokens_per_s_per_gpu = *tps;
  s.tflops_per_gpu = number_after(line, "tflops:").value_or(0);
  s.memory_bytes = number_after(line, "memory:").value_or(0) * 1024 * 1024 * 1024;
  log.samples.push_back(s);
  log.format = "torchtitan";
  return true;
}

}  // namespace

RunLog read_run_log(const std::string& text, const std::string& where) {
  RunLog log;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("using world size:") != std::string::npos)
      log.world_size = whole(number_after(line, "using world size").value_or(0));
    if (megatron_line(line, log) || megatron_memory(line, log) || nemo_line(line, log)) continue;
    torchtitan_line(line, log);
  }
  if (log.samples.empty())
    throw InputError(where + ": no iteration lines found (allowed: a Megatron-LM log with 'elapsed time per iteration (ms)', "
                     "a NeMo log with 'train_step_timing in s', a torchtitan log with 'step: ... tps:')");
  return log;
}

Measured measure(const RunLog& log, int warmup, double tokens_per_iteration, int world) {
  if (warmup < 0 || static_cast<size_t>(warmup) >= log.samples.size())
    throw InputError("--warmup = " + std::to_string(warmup) + " leaves no logged iteration (the log has " + std::to_string(log.samples.size()) +
                     "; allowed: 0 to " + std::to_string(log.samples.size() - 1) + ")");
  Measured m;
  double t = 0, tf = 0, mem = 0;
  int tf_n = 0;
  for (size_t i = static_cast<size_t>(warmup); i < log.samples.size(); ++i) {
    const RunSample& s = log.samples[i];
    t += s.iteration_s > 0 ? s.iteration_s : tokens_per_iteration / (s.tokens_per_s_per_gpu * world);
    if (s.tflops_per_gpu > 0) {
      tf += s.tflops_per_gpu;
      ++tf_n;
    }
    mem = std::max(mem, s.memory_bytes);
  }
  m.samples_used = static_cast<int>(log.samples.size()) - warmup;
  m.first_iteration = log.samples[static_cast<size_t>(warmup)].iteration;
  m.iteration_s = t / m.samples_used;
  if (tf_n > 0) m.tflops_per_gpu = tf / tf_n;
  for (double b : log.rank_max_allocated_bytes) mem = std::max(mem, b);
  if (mem > 0) m.peak_memory_bytes = mem;
  m.memory_kind = log.format == "torchtitan" ? "max reserved" : "max allocated";
  return m;
}

}  // namespace stagecraft::configs
