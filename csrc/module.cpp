// Python bindings of torch_neuronx._C. Everything here runs with the GIL held;
// nothing in the allocator/deleter path ever takes it.
#include "neuron.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <array>

namespace py = pybind11;

namespace torch_neuronx {
namespace {

uint64_t storage_key(const at::Tensor& t) {
  if (!t.has_storage()) {
    return 0;
  }
  // Const access: never materializes a copy-on-write storage.
  return reinterpret_cast<uint64_t>(
      t.unsafeGetTensorImpl()->unsafe_storage().data_ptr().get());
}

// Built with the raw C API: this is polled on hot paths.
py::list events_to_list(const std::vector<StorageEvent>& events) {
  py::list out(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const StorageEvent& e = events[i];
    PyObject* tup = PyTuple_New(5);
    if (tup == nullptr) {
      throw py::error_already_set();
    }
    PyTuple_SET_ITEM(tup, 0, PyLong_FromLong(e.kind));
    PyTuple_SET_ITEM(tup, 1, PyLong_FromUnsignedLongLong(e.key));
    PyTuple_SET_ITEM(tup, 2, PyLong_FromUnsignedLongLong(e.new_key));
    PyTuple_SET_ITEM(tup, 3, PyLong_FromUnsignedLongLong(e.nbytes));
    PyTuple_SET_ITEM(tup, 4, PyLong_FromLong(e.device));
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), tup);
  }
  return out;
}

py::tuple int_tuple(c10::IntArrayRef values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    PyTuple_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(values[i]));
  }
  return out;
}

// One Python object per default generator, so identity checks and
// per-object state (e.g. Python attributes) behave like torch.cuda's.
// Intentionally leaked: they must outlive interpreter teardown ordering.
std::array<PyObject*, kMaxDevices> g_default_generator_objects{};

py::object default_generator_object(int64_t index) {
  check_device_index(index);
  PyObject*& slot = g_default_generator_objects[index];
  if (slot == nullptr) {
    const at::Generator& gen =
        default_generator(static_cast<c10::DeviceIndex>(index));
    slot = THPGenerator_initDefaultGenerator(gen);
    if (slot == nullptr) {
      throw py::error_already_set();
    }
  }
  return py::reinterpret_borrow<py::object>(slot);
}

// RuntimeHooks answered by a Python object (runtime/streams.py). The guard may call from
// any thread, with or without the GIL; a Python exception propagates as it is.
struct PythonRuntimeHooks final : RuntimeHooks {
  explicit PythonRuntimeHooks(py::object obj) : obj_(std::move(obj)) {}

  void synchronize_device(c10::DeviceIndex index) override {
    py::gil_scoped_acquire gil;
    obj_.attr("synchronize_device")(static_cast<int>(index));
  }
  void empty_cache() override {
    py::gil_scoped_acquire gil;
    obj_.attr("empty_cache")();
  }
  bool query_stream(c10::DeviceIndex index, c10::StreamId stream) override {
    py::gil_scoped_acquire gil;
    return obj_.attr("query_stream")(static_cast<int>(index), stream).cast<bool>();
  }
  void synchronize_stream(c10::DeviceIndex index, c10::StreamId stream) override {
    py::gil_scoped_acquire gil;
    obj_.attr("synchronize_stream")(static_cast<int>(index), stream);
  }
  void record_event(uint64_t event, c10::DeviceIndex index, c10::StreamId stream, bool timing)
      override {
    py::gil_scoped_acquire gil;
    obj_.attr("record_event")(event, static_cast<int>(index), stream, timing);
  }
  void block_event(uint64_t event, c10::DeviceIndex index, c10::StreamId stream) override {
    py::gil_scoped_acquire gil;
    obj_.attr("block_event")(event, static_cast<int>(index), stream);
  }
  bool query_event(uint64_t event) override {
    py::gil_scoped_acquire gil;
    return obj_.attr("query_event")(event).cast<bool>();
  }
  void synchronize_event(uint64_t event) override {
    py::gil_scoped_acquire gil;
    obj_.attr("synchronize_event")(event);
  }
  double elapsed_time(uint64_t start, uint64_t end) override {
    py::gil_scoped_acquire gil;
    return obj_.attr("elapsed_time")(start, end).cast<double>();
  }
  void destroy_event(uint64_t event) noexcept override {
    // Runs from torch.Event's destructor, possibly while the interpreter shuts down.
    if (!Py_IsInitialized() || _Py_IsFinalizing()) {
      return;
    }
    try {
      py::gil_scoped_acquire gil;
      obj_.attr("destroy_event")(event);
    } catch (...) {
    }
  }

 private:
  py::object obj_;
};

} // namespace
} // namespace torch_neuronx

namespace torch_neuronx {
py::dict native_kernel_handlers();  // native_kernels.cpp
py::dict native_kernel_stats();
}  // namespace torch_neuronx

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace torch_neuronx;
  m.doc() = "torch_neuronx C++ shim: allocator, events, devices, generators";

  // The constants Python shares with this shim: the event kinds of _drain_events and the lazy
  // flags of _tensor_info. Python reads them here, never spells the numbers itself.
  m.attr("EVENT_FREE") = static_cast<int>(kFree);
  m.attr("EVENT_MOVE") = static_cast<int>(kMove);
  m.attr("LAZY_CONJ") = static_cast<int>(kLazyConj);
  m.attr("LAZY_NEG") = static_cast<int>(kLazyNeg);
  m.attr("RECORD_OP") = static_cast<int>(kRecordOp);
  m.attr("RECORD_GRAPH") = static_cast<int>(kRecordGraph);
  m.attr("RECORD_TRANSFER") = static_cast<int>(kRecordTransfer);

  // The profiler (profiler.cpp); runtime/profiling.py is its only user.
  m.def("_register_activity_profiler", &register_activity_profiler);
  m.def("_profiler_recording", &profiler_recording);
  m.def("_profiler_correlation_id", &profiler_correlation_id);
  m.def("_profiler_record", &profiler_record, py::arg("kind"), py::arg("name"), py::arg("device"),
        py::arg("start_ns"), py::arg("end_ns"), py::arg("correlation"));

  m.def(
      "_drain_events",
      [] { return events_to_list(drain_events()); },
      "Return and clear queued storage events, oldest first: list of "
      "(kind, key, new_key, nbytes, device); kind is EVENT_FREE or EVENT_MOVE.");
  m.def(
      "_refuse_allocations",
      [](std::string message) { refuse_allocations(std::move(message)); },
      "From now on every new neuron storage raises RuntimeError(message) "
      "(called in a child forked after the device runtime started).");
  m.def(
      "_pending_events",
      [] { return pending_events(); },
      "Number of queued storage events (atomic read, no lock).");

  m.def(
      "_set_memory_capacity",
      [](int device, int64_t bytes) {
        set_memory_capacity(static_cast<c10::DeviceIndex>(device), bytes);
      },
      py::arg("device"),
      py::arg("bytes"),
      "Each core's capacity in bytes (0: unbounded); allocating past it raises torch.OutOfMemoryError.");
  m.def(
      "_memory_capacity",
      [](int device) { return memory_capacity(static_cast<c10::DeviceIndex>(device)); },
      py::arg("device"));
  m.def(
      "_record_out_of_memory",
      [](int device) { record_out_of_memory(static_cast<c10::DeviceIndex>(device)); },
      py::arg("device"),
      "Count a platform allocation failure in memory_stats()['num_ooms'].");
  m.def(
      "_note_workspace",
      [](int device, int64_t bytes) { note_workspace(static_cast<c10::DeviceIndex>(device), bytes); },
      py::arg("device"),
      py::arg("bytes"),
      "An executable's launch needs `bytes` of scratch memory: OutOfMemoryError past the capacity, and "
      "counted in the peak memory stats.");
  m.def("_format_bytes", &format_bytes, py::arg("bytes"));
  m.def(
      "_native_kernel_handlers",
      &native_kernel_handlers,
      "XLA FFI handlers of torch's CPU kernels, by custom-call target name (runtime/native_kernels.py).");
  m.def(
      "_bf16_attention_available",
      &bf16_attention_available,
      "Whether this CPU runs bf16 attention with the package's own kernel (bf16_attention.cpp: AVX-512 BF16 without AMX).");
  m.def(
      "_native_kernel_stats",
      &native_kernel_stats,
      "kernel -> (calls, seconds inside it) of each native kernel in this process.");
  m.def(
      "_current_stream",
      [](int device) {
        check_device_index(device);
        return current_stream_id(static_cast<c10::DeviceIndex>(device));
      },
      py::arg("device"),
      "The calling thread's current stream id on neuron:device (0: the default stream).");

  m.def(
      "_set_device_count",
      [](int n) { set_device_count(n); },
      py::arg("n"));
  m.def("_device_count", [] { return device_count(); });
  m.def(
      "_set_runtime_hooks",
      [](py::object hooks) {
        // Kept for the life of the process (never freed: the guard may call it from any
        // thread until exit); set once at registration.
        TORCH_CHECK(runtime_hooks() == nullptr, "neuron runtime hooks are already set");
        set_runtime_hooks(new PythonRuntimeHooks(std::move(hooks)));
      },
      py::arg("hooks"),
      "The object the device guard and allocator ask about streams, events, synchronization and "
      "empty_cache (runtime/streams.py).");
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def(
      "_set_device",
      [](int64_t index) {
        check_device_index(index);
        set_current_device(static_cast<c10::DeviceIndex>(index));
      },
      py::arg("index"));

  m.def("_default_generator", &default_generator_object, py::arg("index"));

  m.def("_storage_key", &storage_key, py::arg("tensor"));
  m.def(
      "_tensor_layout",
      [](const at::Tensor& t) {
        const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
        const bool has_storage = t.has_storage();
        const uint64_t nbytes =
            has_storage ? static_cast<uint64_t>(impl->unsafe_storage().nbytes()) : 0;
        return py::make_tuple(
            storage_key(t),
            nbytes,
            int_tuple(t.sizes()),
            int_tuple(t.strides()),
            t.storage_offset());
      },
      py::arg("tensor"),
      "(storage_key, storage_nbytes, sizes, strides, storage_offset)");

  // The executor's per-tensor read, in one call: None for a tensor not on a neuron device.
  m.def(
      "_tensor_info",
      [](const at::Tensor& t) -> py::object {
        if (t.device().type() != kNeuron) {
          return py::none();
        }
        const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
        const uint64_t nbytes =
            t.has_storage() ? static_cast<uint64_t>(impl->unsafe_storage().nbytes()) : 0;
        auto* dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type()));
        return py::make_tuple(
            static_cast<int>(t.device().index()),
            storage_key(t),
            nbytes,
            int_tuple(t.sizes()),
            int_tuple(t.strides()),
            t.storage_offset(),
            py::reinterpret_borrow<py::object>(dtype),
            (t.is_conj() ? kLazyConj : 0) | (t.is_neg() ? kLazyNeg : 0));
      },
      py::arg("tensor"),
      "(device_index, storage_key, storage_nbytes, sizes, strides, storage_offset, dtype, "
      "lazy flags: LAZY_CONJ | LAZY_NEG), or None off the neuron device");
}
