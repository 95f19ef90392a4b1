// Device count, thread-local current device and the PrivateUse1 device guard.
#include "neuron.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>

namespace torch_neuronx {
namespace {

// 0 until Python calls _set_device_count: using the device before that fails
// with a clear "0 devices" error instead of silently inventing a device.
std::atomic<int> g_device_count{0};
// Like CUDA, every thread starts on device 0, on each device's default stream.
thread_local c10::DeviceIndex t_current_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> t_current_stream{};
std::atomic<RuntimeHooks*> g_hooks{nullptr};

// Stream ids: 0 is the default stream, 1..kPoolSize the pool getStreamFromGlobalPool
// hands out round-robin (as CUDA's), above that one per getNewStream.
constexpr c10::StreamId kPoolSize = 32;
std::atomic<uint64_t> g_pool_next{0};
std::atomic<c10::StreamId> g_next_stream{kPoolSize + 1};
std::atomic<uint64_t> g_next_event{1};

} // namespace

void set_runtime_hooks(RuntimeHooks* hooks) {
  g_hooks.store(hooks);
}

RuntimeHooks* runtime_hooks() noexcept {
  return g_hooks.load();
}

c10::StreamId current_stream_id(c10::DeviceIndex index) {
  check_device_index(index);
  return t_current_stream[index];
}

int device_count() noexcept {
  return g_device_count.load(std::memory_order_relaxed);
}

void set_device_count(int n) {
  TORCH_CHECK(
      n >= 1 && n <= kMaxDevices,
      "neuron device count must be between 1 and ",
      kMaxDevices,
      ", got ",
      n);
  g_device_count.store(n, std::memory_order_relaxed);
}

void check_device_index(int64_t index) {
  const int count = device_count();
  TORCH_CHECK(
      index >= 0 && index < count,
      "neuron device index ",
      index,
      " is out of range: ",
      count,
      count == 1 ? " device" : " devices",
      count == 0 ? " (torch_neuronx._C._set_device_count was not called)"
                 : "");
}

c10::DeviceIndex current_device() noexcept {
  return t_current_device;
}

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  const c10::DeviceIndex previous = t_current_device;
  if (index >= 0 && index != previous) {
    set_current_device(index);
  }
  return previous;
}

namespace {

uint64_t event_id(void* event) {
  return reinterpret_cast<uint64_t>(event);
}

// Streams are ids; what was launched on each and every event's state live in Python
// (runtime/streams.py), reached through RuntimeHooks.
struct NeuronGuardImpl final : c10::impl::DeviceGuardImplInterface {
  NeuronGuardImpl() = default;

  c10::DeviceType type() const override {
    return kNeuron;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "neuron guard got a ", d.type(), " device");
    return c10::Device(kNeuron, exchange_device(d.index()));
  }

  c10::Device getDevice() const override {
    return c10::Device(kNeuron, current_device());
  }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "neuron guard got a ", d.type(), " device");
    if (d.index() >= 0) {
      set_current_device(d.index());
    }
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    // Used from destructors (restoring a guard): never throw, ignore bad input.
    if (d.index() >= 0 && d.index() < device_count()) {
      t_current_device = d.index();
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    const c10::DeviceIndex index = resolve(d);
    return make_stream(index, t_current_stream[index]);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return make_stream(resolve(d), 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return make_stream(resolve(d), 1 + static_cast<c10::StreamId>(g_pool_next++ % kPoolSize));
  }

  c10::Stream getNewStream(c10::Device d, int) const override {
    return make_stream(resolve(d), g_next_stream++);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::DeviceIndex index = resolve(s.device());
    const c10::StreamId previous = t_current_stream[index];
    t_current_stream[index] = s.id();
    return make_stream(index, previous);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event device index ",
        static_cast<int>(device_index),
        " does not match recording stream's device index ",
        static_cast<int>(stream.device_index()),
        ".");
    if (*event == nullptr) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): an id, never dereferenced
      *event = reinterpret_cast<void*>(g_next_event++);
    }
    if (RuntimeHooks* hooks = runtime_hooks()) {
      // torch.Event(enable_timing=True) asks for the backend's default: timing on
      hooks->record_event(
          event_id(*event), stream.device_index(), stream.id(),
          flag == c10::EventFlag::BACKEND_DEFAULT);
    }
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return; // never recorded: nothing to wait for (as CUDA)
    }
    if (RuntimeHooks* hooks = runtime_hooks()) {
      hooks->block_event(event_id(event), stream.device_index(), stream.id());
    }
  }

  bool queryEvent(void* event) const override {
    RuntimeHooks* hooks = runtime_hooks();
    return event == nullptr || hooks == nullptr || hooks->query_event(event_id(event));
  }

  void synchronizeEvent(void* event) const override {
    RuntimeHooks* hooks = runtime_hooks();
    if (event != nullptr && hooks != nullptr) {
      hooks->synchronize_event(event_id(event));
    }
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(
        start != nullptr && end != nullptr,
        "Both events must be recorded before calculating elapsed time.");
    RuntimeHooks* hooks = runtime_hooks();
    TORCH_CHECK(hooks != nullptr, "neuron: the device runtime is not registered");
    return hooks->elapsed_time(event_id(start), event_id(end));
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    RuntimeHooks* hooks = runtime_hooks();
    if (event != nullptr && hooks != nullptr) {
      hooks->destroy_event(event_id(event));
    }
  }

  bool queryStream(const c10::Stream& stream) const override {
    RuntimeHooks* hooks = runtime_hooks();
    return hooks == nullptr || hooks->query_stream(stream.device_index(), stream.id());
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    if (RuntimeHooks* hooks = runtime_hooks()) {
      hooks->synchronize_stream(stream.device_index(), stream.id());
    }
  }

  // The dtypes a neuron tensor can hold: runtime/dtypes.py's TORCH_TO_NUMPY (a test keeps the two equal).
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    auto& t = cap.capability_data.supported_scalar_types;
    t.has_Byte = t.has_Char = t.has_Short = t.has_Int = t.has_Long = 1;
    t.has_UInt16 = t.has_UInt32 = t.has_UInt64 = t.has_Bool = 1;
    t.has_Half = t.has_Float = t.has_Double = t.has_BFloat16 = 1;
    t.has_Float8_e5m2 = t.has_Float8_e4m3fn = 1;
    t.has_ComplexFloat = t.has_ComplexDouble = 1;
    return cap;
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    if (RuntimeHooks* hooks = runtime_hooks()) {
      hooks->synchronize_device(device_index >= 0 ? device_index : current_device());
    }
  }

 private:
  static c10::DeviceIndex resolve(c10::Device d) {
    TORCH_CHECK(d.type() == kNeuron, "neuron guard got a ", d.type(), " device");
    const c10::DeviceIndex index = d.index() >= 0 ? d.index() : current_device();
    check_device_index(index);
    return index;
  }

  static c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), id);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl)

} // namespace
} // namespace torch_neuronx
