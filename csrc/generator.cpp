// Neuron RNG state: just (seed, offset). Python draws numbers with jax from
// that pair and advances the offset itself (gen.get_offset/set_offset).
#include "neuron.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <array>
#include <mutex>

namespace torch_neuronx {
namespace {

constexpr size_t kStateBytes = 16; // seed u64 LE, offset u64 LE

void put_u64_le(uint8_t* dst, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) {
    dst[i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

uint64_t get_u64_le(const uint8_t* src) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(src[i]) << (8 * i);
  }
  return v;
}

struct NeuronGeneratorImpl final : c10::GeneratorImpl {
  explicit NeuronGeneratorImpl(c10::DeviceIndex index)
      : c10::GeneratorImpl(
            c10::Device(kNeuron, index),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  static c10::DeviceType device_type() {
    return kNeuron;
  }

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }

  uint64_t current_seed() const override {
    return seed_;
  }

  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }

  void set_offset(uint64_t offset) override {
    offset_ = offset;
  }

  uint64_t get_offset() const override {
    return offset_;
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::TensorBase state = at::detail::empty_cpu(
        {static_cast<int64_t>(kStateBytes)}, at::kByte, /*pin_memory=*/false);
    auto* bytes = static_cast<uint8_t*>(state.mutable_data_ptr());
    put_u64_le(bytes, seed_);
    put_u64_le(bytes + 8, offset_);
    return state.getIntrusivePtr();
  }

  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(
        state.device_type() == c10::DeviceType::CPU &&
            state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
            state.numel() == static_cast<int64_t>(kStateBytes) &&
            state.is_contiguous(),
        "neuron generator state must be a contiguous CPU uint8 tensor of ",
        kStateBytes,
        " bytes (seed, offset as little-endian uint64), got a ",
        c10::typeMetaToScalarType(state.dtype()),
        " tensor with ",
        state.numel(),
        " elements on ",
        state.device_type());
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    seed_ = get_u64_le(bytes);
    offset_ = get_u64_le(bytes + 8);
  }

 private:
  NeuronGeneratorImpl* clone_impl() const override {
    auto* copy = new NeuronGeneratorImpl(device().index());
    copy->seed_ = seed_;
    copy->offset_ = offset_;
    return copy;
  }

  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

c10::DeviceIndex resolve(c10::DeviceIndex index) {
  if (index < 0) {
    index = current_device();
  }
  check_device_index(index);
  return index;
}

std::mutex g_default_mutex;
std::array<at::Generator, kMaxDevices> g_defaults;

} // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  index = resolve(index);
  std::lock_guard<std::mutex> lock(g_default_mutex);
  at::Generator& gen = g_defaults[index];
  if (!gen.defined()) {
    // Lazily created, deterministic default seed like every other backend.
    gen = at::make_generator<NeuronGeneratorImpl>(index);
  }
  return gen;
}

at::Generator new_generator(c10::DeviceIndex index) {
  return at::make_generator<NeuronGeneratorImpl>(resolve(index));
}

} // namespace torch_neuronx
