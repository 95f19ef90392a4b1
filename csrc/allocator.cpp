// Fake-address allocator, storage lifetime events and memory counters.
#include "neuron.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include <pthread.h>

namespace torch_neuronx {
namespace {

// Keys start high so they can never be confused with small integers or with
// real host pointers handed out early, and ranges never overlap because the
// counter only moves forward (`ptr + offset` of a view stays inside its range).
std::atomic<uint64_t> g_next_address{uint64_t{1} << 48};
constexpr uint64_t kAlignment = 64;
constexpr size_t kMaxAllocation = size_t{1} << 56;

struct AllocationContext {
  uint64_t key;
  size_t nbytes;
  int8_t device;
};

struct DeviceCounters {
  std::atomic<int64_t> bytes_current{0};
  std::atomic<int64_t> bytes_peak{0};
  std::atomic<int64_t> allocs_current{0};
  std::atomic<int64_t> allocs_peak{0};
  std::atomic<int64_t> num_alloc{0};
  std::atomic<int64_t> num_free{0};
};
DeviceCounters g_counters[kMaxDevices];

// The queue is a plain mutex + vector: deleters run on arbitrary threads,
// often while the GIL is held by someone, so they must never need the GIL.
std::mutex g_queue_mutex;
std::vector<StorageEvent> g_queue;
std::atomic<size_t> g_pending{0};

// A fork copies the queue's mutex as it is: held by another thread at that
// moment, it would stay held in the child forever (and the child's first free
// would hang). Fork takes it, so both sides get it unlocked and consistent.
const int g_fork_handlers_registered = pthread_atfork(
    [] { g_queue_mutex.lock(); },
    [] { g_queue_mutex.unlock(); },
    [] { g_queue_mutex.unlock(); });

// Set (once, single-threaded, in a forked child) by refuse_allocations.
bool g_refuse = false;
std::string g_refuse_message;

void push_event(const StorageEvent& ev) {
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  g_queue.push_back(ev);
  g_pending.store(g_queue.size(), std::memory_order_release);
}

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen &&
         !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

DeviceCounters& counters_for(int device) {
  return g_counters[std::clamp(device, 0, kMaxDevices - 1)];
}

// Deleter: no GIL, no Python; just a FREE event and bookkeeping.
void delete_allocation(void* raw) {
  auto* ctx = static_cast<AllocationContext*>(raw);
  push_event({kFree, ctx->key, 0, ctx->nbytes, ctx->device});
  auto& c = counters_for(ctx->device);
  c.bytes_current.fetch_sub(static_cast<int64_t>(ctx->nbytes));
  c.allocs_current.fetch_sub(1);
  c.num_free.fetch_add(1);
  delete ctx;
}

struct NeuronAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_on(nbytes, current_device());
  }

  c10::DeleterFnPtr raw_deleter() const override {
    // The context is not the data pointer, so the raw interface cannot work.
    return nullptr;
  }

  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(
        false,
        "neuron allocator: copy_data is not supported; neuron storages hold "
        "fake addresses and their bytes live in Python (jax) buffers");
  }
};

NeuronAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator)

} // namespace

c10::Allocator* neuron_allocator() {
  return &g_allocator;
}

c10::DataPtr allocate_on(size_t nbytes, c10::DeviceIndex device) {
  TORCH_CHECK(!g_refuse, g_refuse_message);
  const c10::Device dev(kNeuron, device);
  if (nbytes == 0) {
    // Empty storages get no identity (key 0) and therefore no events.
    return c10::DataPtr(nullptr, dev);
  }
  TORCH_CHECK(
      nbytes <= kMaxAllocation,
      "neuron allocator: cannot allocate ",
      nbytes,
      " bytes");
  const uint64_t span = (nbytes + kAlignment - 1) & ~(kAlignment - 1);
  const uint64_t key = g_next_address.fetch_add(span);
  auto* ctx = new AllocationContext{key, nbytes, static_cast<int8_t>(device)};
  auto& c = counters_for(device);
  raise_peak(c.bytes_peak, c.bytes_current.fetch_add(nbytes) + nbytes);
  raise_peak(c.allocs_peak, c.allocs_current.fetch_add(1) + 1);
  c.num_alloc.fetch_add(1);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake, never dereferenced
  return c10::DataPtr(
      reinterpret_cast<void*>(key), ctx, &delete_allocation, dev);
}

void resize_storage_bytes(const c10::Storage& storage, size_t newsize) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl != nullptr, "neuron: cannot resize an undefined storage");
  TORCH_CHECK(
      impl->resizable(),
      "Trying to resize storage that is not resizable");
  TORCH_CHECK(
      impl->device_type() == kNeuron,
      "neuron: resize_storage_bytes got a storage on ",
      impl->device());
  const size_t old_nbytes = impl->nbytes();
  const uint64_t old_key =
      reinterpret_cast<uint64_t>(std::as_const(*impl).data_ptr().get());
  // Same size, same identity: nothing to move (the bytes stay where they are).
  if (newsize == old_nbytes && (old_key != 0 || newsize == 0)) {
    return;
  }
  c10::DeviceIndex device = impl->device().index();
  if (device < 0) {
    device = current_device();
  }
  c10::DataPtr fresh = allocate_on(newsize, device);
  const uint64_t new_key = reinterpret_cast<uint64_t>(fresh.get());
  // MOVE only when there is something to carry over: a key-0 (empty) storage
  // growing just gets a fresh key, a storage shrinking to 0 bytes just FREEs.
  if (old_key != 0 && new_key != 0) {
    push_event(
        {kMove, old_key, new_key, std::min<uint64_t>(old_nbytes, newsize),
         static_cast<int>(device)});
  }
  // Releasing the old DataPtr here runs its deleter -> FREE old (after MOVE).
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(newsize);
}

std::vector<StorageEvent> drain_events() {
  std::vector<StorageEvent> out;
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  out.swap(g_queue);
  g_pending.store(0, std::memory_order_release);
  return out;
}

void refuse_allocations(std::string message) {
  g_refuse_message = std::move(message);
  g_refuse = true;
}

size_t pending_events() noexcept {
  return g_pending.load(std::memory_order_acquire);
}

MemoryStats memory_stats(int device) {
  check_device_index(device);
  const auto& c = g_counters[device];
  return MemoryStats{
      c.bytes_current.load(),
      c.bytes_peak.load(),
      c.allocs_current.load(),
      c.allocs_peak.load(),
      c.num_alloc.load(),
      c.num_free.load()};
}

void reset_peak_memory_stats(int device) {
  check_device_index(device);
  auto& c = g_counters[device];
  c.bytes_peak.store(c.bytes_current.load());
  c.allocs_peak.store(c.allocs_current.load());
}

} // namespace torch_neuronx
