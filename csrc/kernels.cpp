// ATen kernels for PrivateUse1 that only touch metadata: factories wired to
// the fake-address allocator, views (PyTorch's own native implementations)
// and the resize_/set_ family (which must grow storages through our resize,
// never through the CPU path that would memcpy fake addresses).
#include "neuron.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <utility>

namespace torch_neuronx {
namespace {

constexpr c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);

void check_factory_args(
    const c10::Device& device,
    std::optional<c10::Layout> layout,
    std::optional<bool> pin_memory) {
  TORCH_CHECK(
      device.type() == kNeuron,
      "neuron factory kernel called for device ",
      device);
  TORCH_CHECK(
      c10::layout_or_default(layout) == c10::Layout::Strided,
      "neuron tensors only support the strided layout, got ",
      c10::layout_or_default(layout));
  TORCH_CHECK(
      !c10::pinned_memory_or_default(pin_memory),
      "pin_memory is only supported for CPU tensors, not neuron tensors");
}

at::Tensor empty_memory_format(
    at::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device dev = c10::device_or_default(device);
  check_factory_args(dev, layout, pin_memory);
  // The guard validates an explicit index and makes the allocator tag this
  // device; the check also catches "neuron" (no index) before device setup.
  const c10::DeviceGuard guard(dev);
  check_device_index(current_device());
  return at::Tensor(at::detail::empty_generic(
      size,
      neuron_allocator(),
      kNeuronKeys,
      c10::dtype_or_default(dtype),
      memory_format));
}

at::Tensor empty_strided(
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  const c10::Device dev = c10::device_or_default(device);
  check_factory_args(dev, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  check_device_index(current_device());
  return at::Tensor(at::detail::empty_strided_generic(
      size, stride, neuron_allocator(), kNeuronKeys, c10::dtype_or_default(dtype)));
}

// Same contract as at::native::resize_impl_cpu_, but storage growth goes
// through resize_storage_bytes (MOVE/FREE events) instead of a CPU memcpy.
void resize_impl(
    c10::TensorImpl* self,
    at::IntArrayRef size,
    at::OptionalIntArrayRef stride,
    bool resize_storage) {
  if (self->sizes() == size && (!stride || self->strides() == stride.value())) {
    return;
  }
  const auto itemsize = self->dtype().itemsize();
  const auto storage_offset = self->storage_offset();
  size_t storage_nbytes = 0;
  if (stride) {
    self->set_sizes_and_strides(size, *stride);
    storage_nbytes = at::detail::computeStorageNbytes(
        size, *stride, itemsize, storage_offset);
  } else {
    self->set_sizes_contiguous(size);
    storage_nbytes = at::detail::computeStorageNbytesContiguous(
        size, itemsize, storage_offset);
  }
  // Zero-element tensors never need storage (and may carry any offset).
  if (!resize_storage || self->numel() == 0) {
    return;
  }
  const c10::Storage& storage = self->unsafe_storage();
  TORCH_CHECK(storage, "neuron: cannot resize a tensor without storage");
  if (storage_nbytes > storage.nbytes()) {
    resize_storage_bytes(storage, storage_nbytes);
  }
}

const at::Tensor& resize_(
    const at::Tensor& self,
    at::IntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const int64_t old_nbytes =
      impl->unsafe_storage() ? static_cast<int64_t>(impl->unsafe_storage().nbytes()) : 0;
  resize_impl(impl, size, std::nullopt, /*resize_storage=*/true);
  if (memory_format.has_value()) {
    TORCH_CHECK(
        *memory_format != c10::MemoryFormat::Preserve,
        "Unsupported memory format ",
        *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  // Same as at::native::resize_: deterministic mode fills the grown bytes.
  if (C10_UNLIKELY(
          at::globalContext().deterministicAlgorithms() &&
          at::globalContext().deterministicFillUninitializedMemory())) {
    at::native::fill_resize_deterministic_(self, old_nbytes);
  }
  return self;
}

at::Tensor& set_storage_offset(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    at::IntArrayRef size,
    at::IntArrayRef stride) {
  // Validates offset/bounds and device, and installs the storage.
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  const at::OptionalIntArrayRef stride_opt = stride.data() != nullptr
      ? at::OptionalIntArrayRef(stride)
      : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), size, stride_opt, /*resize_storage=*/true);
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  // A fresh empty storage on self's device (the allocator uses the current
  // device, so pin it to self's first).
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0, neuron_allocator(), /*resizable=*/true);
  return self.set_(std::move(storage), 0, {0}, {});
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

// `param.data = other`: PyTorch lets a dense CPU tensor and a dense tensor of its own
// accelerators swap their implementations, but its list of those has no PrivateUse1
// (pytorch issue 196975), so `cpu_param.data = neuron_tensor` (accelerate's and diffusers'
// offloading) failed. PyTorch's answer for a PrivateUse1 backend is to override this op;
// it is reached only when one of the two is a neuron tensor.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_here = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
        (t.device().type() == kNeuron || t.device().type() == c10::DeviceType::CPU);
  };
  if (dense_here(self) && dense_here(from)) {
    return true;
  }
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// Work on another stream that reads this tensor keeps its buffer alive by itself; what
// is left is CUDA's argument checks (the allocator's recordStream).
void record_stream(at::Tensor& self, c10::Stream stream) {
  static_cast<c10::DeviceAllocator*>(neuron_allocator())
      ->recordStream(std::as_const(self.storage()).data_ptr(), stream);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

} // namespace torch_neuronx
