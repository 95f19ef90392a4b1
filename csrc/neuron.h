// Shared declarations of the torch_neuronx C++ shim.
//
// The shim never touches device memory: buffers live in Python (jax arrays).
// C++ only gives storages identities (fake, never dereferenced addresses) and
// lifetimes (FREE/MOVE events that Python drains), plus the device, guard,
// generator and hooks plumbing PyTorch needs for a PrivateUse1 backend.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx {

constexpr int kMaxDevices = 64;
constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// ---- devices (device.cpp) -------------------------------------------------
int device_count() noexcept;
void set_device_count(int n);
// Throws c10::Error naming the bad index and the device count.
void check_device_index(int64_t index);
c10::DeviceIndex current_device() noexcept;
void set_current_device(c10::DeviceIndex index); // validates
// Sets the current device and returns the previous one; -1 means "keep".
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
// The calling thread's current stream on `index` (0: the default stream).
c10::StreamId current_stream_id(c10::DeviceIndex index);

// What the guard and the allocator ask Python for (runtime/streams.py, which owns
// the work launched on each stream and every event's state). Set once by
// _set_runtime_hooks; until then nothing was launched, so there is nothing to wait for.
struct RuntimeHooks {
  virtual ~RuntimeHooks() = default;
  virtual void synchronize_device(c10::DeviceIndex index) = 0; // -1: every device
  virtual void empty_cache() = 0;
  virtual bool query_stream(c10::DeviceIndex index, c10::StreamId stream) = 0;
  virtual void synchronize_stream(c10::DeviceIndex index, c10::StreamId stream) = 0;
  virtual void record_event(uint64_t event, c10::DeviceIndex index, c10::StreamId stream, bool timing) = 0;
  virtual void block_event(uint64_t event, c10::DeviceIndex index, c10::StreamId stream) = 0;
  virtual bool query_event(uint64_t event) = 0;
  virtual void synchronize_event(uint64_t event) = 0;
  virtual double elapsed_time(uint64_t start, uint64_t end) = 0;
  virtual void destroy_event(uint64_t event) noexcept = 0;
};
void set_runtime_hooks(RuntimeHooks* hooks);
RuntimeHooks* runtime_hooks() noexcept; // nullptr until set

// ---- allocator and storage events (allocator.cpp) -------------------------
enum EventKind : int { kFree = 0, kMove = 1 };

// A tensor's lazy bits, as _tensor_info reports them (exported to Python as LAZY_*).
enum LazyFlag : int { kLazyConj = 1, kLazyNeg = 2 };

struct StorageEvent {
  int kind;
  uint64_t key;
  uint64_t new_key;
  uint64_t nbytes;
  int device;
};

c10::Allocator* neuron_allocator();
// Allocation tagged with an explicit device (used by storage resize).
c10::DataPtr allocate_on(size_t nbytes, c10::DeviceIndex device);
// Grow/shrink a storage to `newsize` bytes: new key, MOVE (old -> new) queued
// before the old DataPtr is released (which queues FREE old).
void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

std::vector<StorageEvent> drain_events();
size_t pending_events() noexcept;
// In a process forked after the device runtime started, every new storage
// throws `message` (a RuntimeError in Python) instead of getting a key.
void refuse_allocations(std::string message);

// Counters in CUDA's caching allocator's terms. allocated: live storages;
// reserved: storages whose device buffers are not released yet (a dead storage's
// buffer goes when Python drains its FREE event: storage.sync, empty_cache).
c10::CachingDeviceAllocator::DeviceStats memory_stats(c10::DeviceIndex device);
void reset_peak_memory_stats(c10::DeviceIndex device);
void reset_accumulated_memory_stats(c10::DeviceIndex device);
// Each core's capacity in bytes (0: unbounded). Allocating past it raises
// torch.OutOfMemoryError; so does a platform allocation failure Python reports.
void set_memory_capacity(c10::DeviceIndex device, int64_t bytes);
int64_t memory_capacity(c10::DeviceIndex device);
void record_out_of_memory(c10::DeviceIndex device);
// An executable about to launch needs `bytes` of scratch memory beside its buffers (XLA's temporaries):
// raises OutOfMemoryError past the capacity, and counts it in the peaks of memory_stats().
void note_workspace(c10::DeviceIndex device, int64_t bytes);
std::string format_bytes(int64_t bytes);

// ---- pinned host memory (host_allocator.cpp) --------------------------------
c10::Allocator* pinned_allocator();
bool is_pinned(const void* ptr);

// ---- generators (generator.cpp) -------------------------------------------
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

// ---- profiler (profiler.cpp) ------------------------------------------------
// What a device record is (exported to Python as RECORD_*): a row each in the trace.
enum RecordKind : int { kRecordOp = 0, kRecordGraph = 1, kRecordTransfer = 2 };
// Registers the Kineto activity profiler of ProfilerActivity.PrivateUse1 (once).
void register_activity_profiler();
// Whether a profile that asked for the device is recording now.
bool profiler_recording() noexcept;
// The correlation id of the CPU op running on this thread (0: none).
int64_t profiler_correlation_id() noexcept;
// One device interval, in ns since the epoch (system clock), kept while recording.
void profiler_record(int kind, std::string name, int device, int64_t start_ns, int64_t end_ns, int64_t correlation);

// bfloat16 attention for CPUs with AVX-512 BF16 (bf16_attention.cpp): whether it takes these 4-d
// (B, H, L, E) q and (B, H, S, E/Ev) k, v, and the call, writing `out` (B, L, H, Ev) and `lse` (B, H, L).
bool bf16_attention_available();  // this CPU has AVX-512 BF16 and no AMX BF16 (where torch's kernel is faster)
bool bf16_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal);
void bf16_attention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
    double scale, const at::Tensor& out, const at::Tensor& lse);

} // namespace torch_neuronx
