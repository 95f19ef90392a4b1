// PrivateUse1 hooks: how generic PyTorch code (torch.Generator, storage
// resize, torch.accelerator, ...) reaches this backend.
#include "neuron.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace torch_neuronx {
namespace {

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  // Compiled in whenever this module is loaded; must never throw.
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return true;
  }

  void init() const override {}

  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  void setCurrentDevice(c10::DeviceIndex index) const override {
    set_current_device(index);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    return exchange_device(index);
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    if (index < 0 || index >= device_count()) {
      return current_device();
    }
    return exchange_device(index);
  }

  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex index) const override {
    return default_generator(index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index);
  }

  // Keys carry no device bits and we keep no pointer map: the current
  // device is the documented best effort.
  at::Device getDeviceFromPtr(void*) const override {
    return at::Device(kNeuron, current_device());
  }

  bool isPinnedPtr(const void* ptr) const override {
    return is_pinned(ptr);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_allocator();
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize)
      const override {
    resize_storage_bytes(storage, newsize);
  }
};

// Registered when the extension is dlopen'ed. Registering twice aborts the
// process (TORCH_CHECK in a static initializer), so skip if one exists.
const bool g_hooks_registered = [] {
  if (!at::isPrivateUse1HooksRegistered()) {
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  }
  return true;
}();

} // namespace
} // namespace torch_neuronx
