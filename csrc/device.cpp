// Device count, thread-local current device and the PrivateUse1 device guard.
#include "neuron.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>

namespace torch_neuronx {
namespace {

// 0 until Python calls _set_device_count: using the device before that fails
// with a clear "0 devices" error instead of silently inventing a device.
std::atomic<int> g_device_count{0};
// Like CUDA, every thread starts on device 0.
thread_local c10::DeviceIndex t_current_device = 0;
std::atomic<SynchronizeHook> g_synchronize_hook{nullptr};

void synchronize(c10::DeviceIndex index) {
  if (SynchronizeHook hook = g_synchronize_hook.load()) {
    hook(index);
  }
}

} // namespace

void set_synchronize_hook(SynchronizeHook hook) {
  g_synchronize_hook.store(hook);
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

// One default stream per device; all work on a device is ordered on it, so
// streams and events are trivially synchronous.
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
    return default_stream(d);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return default_stream(d);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return default_stream(d);
  }

  c10::Stream getNewStream(c10::Device d, int) const override {
    return default_stream(d);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    return default_stream(s.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  // Events: dispatch is ordered on the single stream, so an event is
  // complete as soon as it is recorded.
  void record(
      void** /*event*/,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "neuron: event device index ",
        device_index,
        " does not match the recording stream's device index ",
        stream.device_index());
  }

  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}

  bool queryEvent(void* /*event*/) const override {
    return true;
  }

  // One stream per device: an event, a stream and the device are done together.
  void synchronizeEvent(void* /*event*/) const override {
    synchronize(current_device());
  }

  void destroyEvent(void* /*event*/, const c10::DeviceIndex) const noexcept
      override {}

  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize(stream.device_index());
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
    synchronize(device_index >= 0 ? device_index : current_device());
  }

 private:
  static c10::Stream default_stream(c10::Device d) {
    const c10::DeviceIndex index = d.index() >= 0 ? d.index() : current_device();
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kNeuron, index));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl)

} // namespace
} // namespace torch_neuronx
