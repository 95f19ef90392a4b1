// Pinned host memory: what `tensor.pin_memory()` and `torch.empty(..., pin_memory=True)` get
// while the neuron device is present, and what torch.accelerator's host-cache calls reach.
//
// There is no page locking on the PJRT CPU platform, and nothing to gain from it: a copy to
// the device is a host memcpy into a fresh buffer, which runs while the device computes
// whether the source is pinned or not (benchmarks/transfer_overlap.py measures both). Blocks
// are page aligned and cached by power-of-two size, as CUDA's host allocator caches them;
// empty_cache returns the free ones to the system.
#include "neuron.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace torch_neuronx {
namespace {

constexpr size_t kPageSize = 4096;

size_t size_class(size_t nbytes) {
  size_t size = kPageSize;
  while (size < nbytes) {
    size <<= 1;
  }
  return size;
}

void free_pinned(void* ptr);

struct NeuronHostAllocator final : at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) {
      return {nullptr, nullptr, &free_pinned, c10::DeviceType::CPU};
    }
    const size_t size = size_class(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    auto& cached = free_[size];
    if (!cached.empty()) {
      ptr = cached.back();
      cached.pop_back();
    } else {
      const auto start = std::chrono::steady_clock::now();
      if (posix_memalign(&ptr, kPageSize, size) != 0) {
        ptr = nullptr;
      }
      TORCH_CHECK_WITH(
          OutOfMemoryError,
          ptr != nullptr,
          "pin_memory: cannot allocate ",
          format_bytes(static_cast<int64_t>(size)),
          " of pinned host memory");
      stats_.host_alloc_time.increase(
          std::chrono::duration_cast<std::chrono::microseconds>(
              std::chrono::steady_clock::now() - start)
              .count());
      stats_.num_host_alloc += 1;
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(size);
      blocks_[reinterpret_cast<uintptr_t>(ptr)] = size;
    }
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(size);
    return {ptr, ptr, &free_pinned, c10::DeviceType::CPU};
  }

  void release(void* ptr) {
    if (ptr == nullptr) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    TORCH_INTERNAL_ASSERT(it != blocks_.end(), "pinned allocator: freeing an unknown block");
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(it->second);
    free_[it->second].push_back(ptr);
  }

  bool contains(const void* ptr) {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) {
      return false;
    }
    --it;
    return p < it->first + it->second;
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned; // the context is the pointer
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // No device work holds a pinned block after the call that read it returns (a copy from
  // one reads it into a device buffer first), so a freed block is reusable at once.
  bool record_event(void*, void*, c10::Stream) override {
    return true;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_) {
      for (void* ptr : blocks) {
        const auto start = std::chrono::steady_clock::now();
        std::free(ptr);
        stats_.host_free_time.increase(
            std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start)
                .count());
        blocks_.erase(reinterpret_cast<uintptr_t>(ptr));
        stats_.num_host_free += 1;
        stats_.allocations.decrease(1);
        stats_.allocated_bytes.decrease(size);
      }
      blocks.clear();
    }
  }

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated_stats() override {
    reset([](auto& stat) { stat.reset_accumulated(); });
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }

  void reset_peak_stats() override {
    reset([](auto& stat) { stat.reset_peak(); });
  }

 private:
  template <typename Reset>
  void reset(Reset fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                       &stats_.allocated_bytes}) {
      fn(*stat);
    }
    fn(stats_.host_alloc_time);
    fn(stats_.host_free_time);
  }

  std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_; // every block, in use or cached: start -> size
  std::unordered_map<size_t, std::vector<void*>> free_;
  at::HostStats stats_;
};

NeuronHostAllocator g_host_allocator;

void free_pinned(void* ptr) {
  g_host_allocator.release(ptr);
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator)

} // namespace

c10::Allocator* pinned_allocator() {
  return &g_host_allocator;
}

bool is_pinned(const void* ptr) {
  return ptr != nullptr && g_host_allocator.contains(ptr);
}

} // namespace torch_neuronx
