// Fake-address allocator, storage lifetime events and memory counters.
#include "neuron.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
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

// Each device's counters under its own mutex: the deleter runs on any thread.
struct DeviceCounters {
  std::mutex mutex;
  c10::CachingDeviceAllocator::DeviceStats stats;
  int64_t capacity = 0; // bytes; 0: unbounded
};
DeviceCounters g_counters[kMaxDevices];

constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

void count_allocation(c10::CachingDeviceAllocator::DeviceStats& st, size_t nbytes) {
  for (auto* stat : {&st.allocation[kAll], &st.active[kAll], &st.segment[kAll]}) {
    stat->increase(1);
  }
  for (auto* stat : {&st.allocated_bytes[kAll], &st.active_bytes[kAll],
                     &st.requested_bytes[kAll], &st.reserved_bytes[kAll]}) {
    stat->increase(nbytes);
  }
  st.num_device_alloc += 1;
}

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

DeviceCounters& counters_for(int device) {
  return g_counters[std::clamp(device, 0, kMaxDevices - 1)];
}

// Deleter: no GIL, no Python; just a FREE event and bookkeeping.
// Raises OutOfMemoryError (counting it) when `nbytes` more than what is allocated would pass the
// device's capacity; `what` starts the message. Called with c.mutex held.
void check_capacity(DeviceCounters& c, c10::DeviceIndex device, int64_t nbytes, const char* what) {
  const int64_t allocated = c.stats.allocated_bytes[kAll].current;
  if (c.capacity <= 0 || allocated + nbytes <= c.capacity) {
    return;
  }
  c.stats.num_ooms += 1;
  const int64_t reserved = c.stats.reserved_bytes[kAll].current;
  TORCH_CHECK_WITH(
      OutOfMemoryError,
      false,
      "neuron out of memory. ",
      what,
      format_bytes(nbytes),
      ". neuron:",
      static_cast<int>(device),
      " has a total capacity of ",
      format_bytes(c.capacity),
      " of which ",
      format_bytes(std::max<int64_t>(c.capacity - allocated, 0)),
      " is free. Of the allocated memory ",
      format_bytes(allocated),
      " is allocated by PyTorch, and ",
      format_bytes(std::max<int64_t>(reserved - allocated, 0)),
      " is reserved by PyTorch but unallocated (torch.neuron.empty_cache() releases it). "
      "The capacity is TORCH_NEURONX_CORE_MEMORY's, or the platform's memory when it is unset.");
}

void delete_allocation(void* raw) {
  auto* ctx = static_cast<AllocationContext*>(raw);
  {
    // The storage is gone (allocated drops now); its buffer stays reserved until
    // Python drains this FREE (drain_events).
    auto& c = counters_for(ctx->device);
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.allocation[kAll].decrease(1);
    c.stats.active[kAll].decrease(1);
    c.stats.allocated_bytes[kAll].decrease(ctx->nbytes);
    c.stats.active_bytes[kAll].decrease(ctx->nbytes);
    c.stats.requested_bytes[kAll].decrease(ctx->nbytes);
  }
  push_event({kFree, ctx->key, 0, ctx->nbytes, ctx->device});
  delete ctx;
}

// A DeviceAllocator, so torch.accelerator's memory functions reach it.
struct NeuronAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_on(nbytes, current_device());
  }

  bool initialized() override {
    return device_count() > 0;
  }

  void emptyCache(c10::MempoolId_t /*pool*/) override {
    if (RuntimeHooks* hooks = runtime_hooks()) {
      hooks->empty_cache();
    }
  }

  // A buffer that work on another stream still reads stays alive by itself (the
  // platform holds it until that work is done), so there is nothing to record.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    TORCH_CHECK(
        stream.device_type() == kNeuron,
        "record_stream: expected a neuron stream, got a ",
        stream.device_type(),
        " stream");
    TORCH_CHECK(
        ptr.device().index() < 0 || ptr.device().index() == stream.device_index(),
        "record_stream: the tensor is on neuron:",
        static_cast<int>(ptr.device().index()),
        " but the stream is on neuron:",
        static_cast<int>(stream.device_index()));
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return memory_stats(device);
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    reset_accumulated_memory_stats(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    reset_peak_memory_stats(device);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const auto st = memory_stats(device);
    const int64_t total = memory_capacity(device);
    const int64_t used = st.reserved_bytes[kAll].current;
    return {static_cast<size_t>(std::max<int64_t>(total - used, 0)), static_cast<size_t>(total)};
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
  {
    auto& c = counters_for(device);
    std::lock_guard<std::mutex> lock(c.mutex);
    check_capacity(c, device, static_cast<int64_t>(nbytes), "Tried to allocate ");
    count_allocation(c.stats, nbytes);
  }
  const uint64_t span = (nbytes + kAlignment - 1) & ~(kAlignment - 1);
  const uint64_t key = g_next_address.fetch_add(span);
  auto* ctx = new AllocationContext{key, nbytes, static_cast<int8_t>(device)};
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
  {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    out.swap(g_queue);
    g_pending.store(0, std::memory_order_release);
  }
  // Python releases these buffers now: they stop being reserved.
  for (const StorageEvent& ev : out) {
    if (ev.kind == kFree) {
      auto& c = counters_for(ev.device);
      std::lock_guard<std::mutex> lock(c.mutex);
      c.stats.reserved_bytes[kAll].decrease(ev.nbytes);
      c.stats.segment[kAll].decrease(1);
      c.stats.num_device_free += 1;
    }
  }
  return out;
}

void refuse_allocations(std::string message) {
  g_refuse_message = std::move(message);
  g_refuse = true;
}

size_t pending_events() noexcept {
  return g_pending.load(std::memory_order_acquire);
}

c10::CachingDeviceAllocator::DeviceStats memory_stats(c10::DeviceIndex device) {
  check_device_index(device);
  auto& c = g_counters[device];
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

// Runs `reset` on every Stat of a device's counters and `rest` on the counters, under its mutex.
template <typename Reset>
void reset_stats(c10::DeviceIndex device, Reset reset, void (*rest)(c10::CachingDeviceAllocator::DeviceStats&)) {
  check_device_index(device);
  auto& c = g_counters[device];
  std::lock_guard<std::mutex> lock(c.mutex);
  auto& st = c.stats;
  for (auto* arr : {&st.allocation, &st.segment, &st.active, &st.inactive_split,
                    &st.allocated_bytes, &st.reserved_bytes, &st.active_bytes,
                    &st.inactive_split_bytes, &st.requested_bytes}) {
    for (auto& stat : *arr) {
      reset(stat);
    }
  }
  reset(st.oversize_allocations);
  reset(st.oversize_segments);
  rest(st);
}

void reset_peak_memory_stats(c10::DeviceIndex device) {
  reset_stats(
      device, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); },
      [](c10::CachingDeviceAllocator::DeviceStats&) {});
}

void reset_accumulated_memory_stats(c10::DeviceIndex device) {
  reset_stats(
      device, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); },
      [](c10::CachingDeviceAllocator::DeviceStats& st) {
        st.num_alloc_retries = st.num_ooms = st.num_sync_all_streams = 0;
        st.num_device_alloc = st.num_device_free = 0;
      });
}

void set_memory_capacity(c10::DeviceIndex device, int64_t bytes) {
  check_device_index(device);
  TORCH_CHECK(bytes >= 0, "neuron memory capacity must be >= 0 bytes, got ", bytes);
  auto& c = g_counters[device];
  std::lock_guard<std::mutex> lock(c.mutex);
  c.capacity = bytes;
}

int64_t memory_capacity(c10::DeviceIndex device) {
  check_device_index(device);
  auto& c = g_counters[device];
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.capacity;
}

void note_workspace(c10::DeviceIndex device, int64_t bytes) {
  if (bytes <= 0) {
    return;
  }
  auto& c = counters_for(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  check_capacity(c, device, bytes, "An executable needs a workspace of ");
  for (auto* stat : {&c.stats.allocated_bytes[kAll], &c.stats.active_bytes[kAll],
                     &c.stats.requested_bytes[kAll], &c.stats.reserved_bytes[kAll]}) {
    stat->peak = std::max(stat->peak, stat->current + bytes);
  }
}

void record_out_of_memory(c10::DeviceIndex device) {
  auto& c = counters_for(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.num_ooms += 1;
}

// As CUDA's messages spell sizes: 1.50 GiB, 512.00 MiB, 12 bytes.
std::string format_bytes(int64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    return std::to_string(bytes) + " bytes";
  }
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  return text;
}

} // namespace torch_neuronx
