// Shared declarations of the torch_neuronx C++ shim.
//
// The shim never touches device memory: buffers live in Python (jax arrays).
// C++ only gives storages identities (fake, never dereferenced addresses) and
// lifetimes (FREE/MOVE events that Python drains), plus the device, guard,
// generator and hooks plumbing PyTorch needs for a PrivateUse1 backend.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
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
// What the guard's synchronize calls (torch.accelerator.synchronize, Stream/Event
// synchronize): waits for the device's buffers. Set by Python (runtime/storage.py);
// until then synchronizing has nothing to wait for.
using SynchronizeHook = void (*)(c10::DeviceIndex index);
void set_synchronize_hook(SynchronizeHook hook);

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

struct MemoryStats {
  int64_t allocated_bytes_current;
  int64_t allocated_bytes_peak;
  int64_t allocations_current;
  int64_t allocations_peak;
  int64_t num_alloc;
  int64_t num_free;
};
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);

// ---- generators (generator.cpp) -------------------------------------------
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

} // namespace torch_neuronx
