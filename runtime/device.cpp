#include "runtime/device.h"
#include "runtime/memory_counter.h"

#include <ATen/autocast_mode.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "schedules/error.h"

#if defined(STAGECRAFT_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace stagecraft::runtime {

namespace {

// Autocast's per-device switches: LibTorch 2.4 made them take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
torch::ScalarType autocast_dtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void set_autocast(c10::DeviceType t, bool on, torch::ScalarType dtype) {
  at::autocast::set_autocast_dtype(t, dtype);
  at::autocast::set_autocast_enabled(t, on);
}
#else
bool autocast_enabled(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
torch::ScalarType autocast_dtype(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast(c10::DeviceType t, bool on, torch::ScalarType dtype) {
  if (t == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  }
}
#endif

[[noreturn]] void no_cuda(const char* what) {
  throw InputError(std::string(what) + ": this build's LibTorch (" TORCH_VERSION
                   ") has no CUDA; build against a CUDA LibTorch (docs/gpu.md)");
}

}  // namespace

// nccl: the GPU `local_rank % visible GPUs` (an error without one); store: the same GPU where
// this build and machine have one (several ranks may share it: the point of the backend), else
// the CPU; gloo: the CPU.
torch::Device device_for_backend(const std::string& backend, int local_rank) {
  if (backend != "nccl" && backend != "store") return torch::Device(torch::kCPU);
#if defined(STAGECRAFT_WITH_CUDA)
  const int n = static_cast<int>(torch::cuda::device_count());
  if (n > 0) return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % n));
  if (backend == "store") return torch::Device(torch::kCPU);
  throw InputError("--backend nccl: no CUDA GPU is visible on this machine");
#else
  (void)local_rank;
  if (backend == "store") return torch::Device(torch::kCPU);
  no_cuda("--backend nccl");
#endif
}

AutocastScope::AutocastScope(const torch::Device& d, Precision p) : device_(d), on_(p == Precision::Bf16) {
  if (!on_) return;
  was_enabled_ = autocast_enabled(d.type());
  set_autocast(d.type(), true, torch::kBFloat16);
}

AutocastScope::~AutocastScope() {
  if (on_) set_autocast(device_.type(), was_enabled_, torch::kBFloat16);
}

torch::Tensor autocast_input(const torch::Tensor& t) {
  const auto dev = t.device().type();
  if (!autocast_enabled(dev) || !t.is_floating_point()) return t;
  return t.to(autocast_dtype(dev));
}

void clear_autocast_cache() { at::autocast::clear_cache(); }

namespace {
struct KeptCopy {
  // The weight itself, weakly: a TensorImpl freed and its address reused by another weight (a
  // profile's next shape) must not find this copy.
  c10::weak_intrusive_ptr<c10::TensorImpl> weight;
  std::int64_t version = -1;  // the weight's version counter when it was cast
  torch::Tensor copy;         // shaped like the weight, in autocast's dtype
};
struct WeightCopyCache {
  std::mutex mu;
  WeightCopies mode = WeightCopies::Kept;
  std::unordered_map<const c10::TensorImpl*, KeptCopy> kept;  // by the weight's TensorImpl
  std::int64_t casts = 0;
};
WeightCopyCache& weight_cache() {
  static WeightCopyCache c;
  return c;
}
}  // namespace

torch::Tensor autocast_weight(const torch::Tensor& w) {
  const auto dev = w.device().type();
  if (!autocast_enabled(dev) || !w.is_floating_point()) return w;
  WeightCopyCache& c = weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const std::int64_t version = static_cast<std::int64_t>(w._version());
  if (c.mode == WeightCopies::Kept) {
    auto it = c.kept.find(w.unsafeGetTensorImpl());
    if (it != c.kept.end() && !it->second.weight.expired() && it->second.version == version) return it->second.copy;
  }
  ++c.casts;
  if (c.mode == WeightCopies::Cast) return w.to(autocast_dtype(dev));
  for (auto it = c.kept.begin(); it != c.kept.end();)  // the copies of weights that are gone
    it = it->second.weight.expired() ? c.kept.erase(it) : std::next(it);
  MemoryScope scope(MemCategory::Parameters);  // the model's bf16 weights, as Megatron-LM holds them
  torch::Tensor copy = w.detach().to(autocast_dtype(dev));
  c.kept.insert_or_assign(w.unsafeGetTensorImpl(), KeptCopy{c10::weak_intrusive_ptr<c10::TensorImpl>(w.getIntrusivePtr()), version, copy});
  return copy;
}

bool fork_safe() {
#if defined(STAGECRAFT_WITH_CUDA)
  return false;
#else
  return true;
#endif
}

void set_tf32(bool on) { at::globalContext().setAllowTF32CuBLAS(on); }

void set_weight_copies(WeightCopies w) {
  WeightCopyCache& c = weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.mode = w;
  c.kept.clear();
}

void drop_weight_copies(const std::vector<torch::Tensor>& params) {
  WeightCopyCache& c = weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (const torch::Tensor& p : params) c.kept.erase(p.unsafeGetTensorImpl());
}

std::int64_t weight_casts() {
  WeightCopyCache& c = weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.casts;
}

void synchronize(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

torch::Tensor host_buffer_like(const torch::Tensor& t, const torch::Device& d) {
  auto o = t.options().device(torch::kCPU).requires_grad(false);
  if (d.is_cuda()) o = o.pinned_memory(true);
  return torch::empty(t.sizes(), o);
}

namespace {
// Bytes in tensors on `d`: GPU `d`'s caching allocator, or the CPU's counting allocator (-1
// when it is not installed); the peak since the last reset, or now.
std::int64_t allocated_bytes(const torch::Device& d, bool peak) {
  if (!d.is_cuda()) return peak ? counted_peak_bytes(CountedDevice::Cpu) : counted_live_bytes(CountedDevice::Cpu);
#if defined(STAGECRAFT_WITH_CUDA)
  // Index 0 is StatType::AGGREGATE (declared in c10::CachingDeviceAllocator since 2.5, in
  // c10::cuda::CUDACachingAllocator before; the first enumerator in both).
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
  const auto& stat = stats.allocated_bytes[0];
  return peak ? stat.peak : stat.current;
#else
  (void)peak;
  no_cuda("device memory statistics");
#endif
}
}  // namespace

std::int64_t device_peak_bytes(const torch::Device& d) { return allocated_bytes(d, true); }
std::int64_t device_allocated_bytes(const torch::Device& d) { return allocated_bytes(d, false); }

torch::Device parse_device(const std::string& name, const std::string& what) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) != 0) throw InputError(what + " '" + name + "' is invalid (allowed: cpu, cuda, cuda:N)");
#if defined(STAGECRAFT_WITH_CUDA)
  torch::Device d(torch::kCPU);
  try {
    d = torch::Device(name);
  } catch (const c10::Error&) {
    throw InputError(what + " '" + name + "' is invalid (allowed: cpu, cuda, cuda:N)");
  }
  const int n = static_cast<int>(torch::cuda::device_count());
  const int index = d.has_index() ? d.index() : 0;
  if (index >= n) throw InputError(what + " '" + name + "': this machine shows " + std::to_string(n) + " CUDA GPUs");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#else
  no_cuda((what + " " + name).c_str());
#endif
}

void reset_device_peak(const torch::Device& d) {
  if (!d.is_cuda()) return reset_counted_peak(CountedDevice::Cpu);
#if defined(STAGECRAFT_WITH_CUDA)
  // The caching allocator initialises lazily, at the first allocation; resetting its statistics
  // before that fails with "Invalid device argument" (seen with LibTorch 2.11 on an H200).
  (void)torch::empty({1}, torch::TensorOptions().device(d));
  c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
  reset_counted_peak(CountedDevice::Cuda);
#endif
}

void install_memory_counter(const torch::Device& d) {
  if (d.is_cuda()) return install_cuda_memory_counter(d.index());
  install_cpu_memory_counter();
}

bool memory_counter_installed(const torch::Device& d) {
  return memory_counter_installed(d.is_cuda() ? CountedDevice::Cuda : CountedDevice::Cpu);
}

MemBreakdown device_peak_breakdown(const torch::Device& d) {
  return counted_peak_breakdown(d.is_cuda() ? CountedDevice::Cuda : CountedDevice::Cpu);
}

std::string describe(const torch::Device& d) {
  if (!d.is_cuda()) return "cpu";
#if defined(STAGECRAFT_WITH_CUDA)
  const auto* prop = at::cuda::getDeviceProperties(d.index());
  return std::string(prop->name) + " (" + std::to_string(prop->totalGlobalMem >> 20) + " MiB)";
#else
  no_cuda("describe device");
#endif
}

double memory_per_rank(const torch::Device& d, int local_ranks, std::string& what) {
  const auto gib = [](double b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f GiB", b / (1024.0 * 1024.0 * 1024.0));
    return std::string(s);
  };
  int sharing = std::max(1, local_ranks);
  double total = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  std::string of = "of this machine's physical memory";
  if (d.is_cuda()) {
#if defined(STAGECRAFT_WITH_CUDA)
    const int gpus = std::max(1, static_cast<int>(torch::cuda::device_count()));
    sharing = (sharing + gpus - 1) / gpus;
    total = static_cast<double>(at::cuda::getDeviceProperties(d.index())->totalGlobalMem);
    of = "of GPU " + std::to_string(d.index()) + "'s memory";
#else
    no_cuda("memory of a GPU");
#endif
  }
  what = gib(total) + " " + of + (sharing > 1 ? " shared by " + std::to_string(sharing) + " local ranks" : "");
  return total / sharing;
}

// ---------------------------------------------------------------------------------------------
// Timeline

struct Timeline::Impl {
  torch::Device device;
  Clock::time_point t0;
  std::vector<double> host_s;    // host clock of each mark, since t0
  std::vector<double> resolved;  // seconds since t0 after resolve()
  double resolved_at_s = 0;
#if defined(STAGECRAFT_WITH_CUDA)
  // Events are reused across iterations; ref is recorded at begin(), with its host time.
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
  std::unique_ptr<at::cuda::CUDAEvent> ref;
  double ref_host_s = 0;
#endif
  explicit Impl(const torch::Device& d) : device(d) {}
  double host_now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
};

Timeline::Timeline(const torch::Device& d) : impl_(new Impl(d)) {
#if !defined(STAGECRAFT_WITH_CUDA)
  if (d.is_cuda()) no_cuda("device timing");
#endif
}

Timeline::~Timeline() { delete impl_; }

void Timeline::begin(Clock::time_point t0) {
  Impl& m = *impl_;
  m.t0 = t0;
  m.host_s.clear();
  m.resolved.clear();
#if defined(STAGECRAFT_WITH_CUDA)
  if (m.device.is_cuda()) {
    // The previous iteration ended with resolve() (a synchronisation), so the stream is idle
    // and the reference event's time is the host time at which it is recorded.
    if (!m.ref) m.ref = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    m.ref_host_s = m.host_now();
    m.ref->record(at::cuda::getCurrentCUDAStream(m.device.index()));
  }
#endif
}

int Timeline::mark() {
  Impl& m = *impl_;
  m.host_s.push_back(m.host_now());
  const int k = static_cast<int>(m.host_s.size()) - 1;
#if defined(STAGECRAFT_WITH_CUDA)
  if (m.device.is_cuda()) {
    if (m.events.size() <= static_cast<size_t>(k)) m.events.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    m.events[static_cast<size_t>(k)]->record(at::cuda::getCurrentCUDAStream(m.device.index()));
  }
#endif
  return k;
}

void Timeline::resolve() {
  Impl& m = *impl_;
  synchronize(m.device);
  m.resolved = m.host_s;
#if defined(STAGECRAFT_WITH_CUDA)
  if (m.device.is_cuda())
    for (size_t k = 0; k < m.host_s.size(); ++k)
      m.resolved[k] = m.ref_host_s + static_cast<double>(m.ref->elapsed_time(*m.events[k])) * 1e-3;
#endif
  m.resolved_at_s = m.host_now();
}

double Timeline::seconds(int mark) const {
  const auto& r = impl_->resolved;
  if (mark < 0 || static_cast<size_t>(mark) >= r.size()) throw Error("Timeline: mark " + std::to_string(mark) + " is not resolved");
  return r[static_cast<size_t>(mark)];
}

double Timeline::resolved_at_s() const { return impl_->resolved_at_s; }

}  // namespace stagecraft::runtime
