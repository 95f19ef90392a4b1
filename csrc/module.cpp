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

// The Python function the guard's synchronize calls (runtime.storage.synchronize).
py::object* g_synchronize = nullptr;

void synchronize_from_guard(c10::DeviceIndex index) {
  py::gil_scoped_acquire gil;
  if (g_synchronize != nullptr) {
    (*g_synchronize)(static_cast<int>(index));
  }
}

} // namespace
} // namespace torch_neuronx

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace torch_neuronx;
  m.doc() = "torch_neuronx C++ shim: allocator, events, devices, generators";

  // The constants Python shares with this shim: the event kinds of _drain_events and the lazy
  // flags of _tensor_info. Python reads them here, never spells the numbers itself.
  m.attr("EVENT_FREE") = static_cast<int>(kFree);
  m.attr("EVENT_MOVE") = static_cast<int>(kMove);
  m.attr("LAZY_CONJ") = static_cast<int>(kLazyConj);
  m.attr("LAZY_NEG") = static_cast<int>(kLazyNeg);

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
      "_memory_stats",
      [](int device) {
        const MemoryStats s = memory_stats(device);
        py::dict d;
        d["allocated_bytes.all.current"] = s.allocated_bytes_current;
        d["allocated_bytes.all.peak"] = s.allocated_bytes_peak;
        d["allocation.all.current"] = s.allocations_current;
        d["allocation.all.peak"] = s.allocations_peak;
        d["num_alloc"] = s.num_alloc;
        d["num_free"] = s.num_free;
        return d;
      },
      py::arg("device"));
  m.def(
      "_reset_peak_memory_stats",
      [](int device) { reset_peak_memory_stats(device); },
      py::arg("device"));

  m.def(
      "_set_device_count",
      [](int n) { set_device_count(n); },
      py::arg("n"));
  m.def("_device_count", [] { return device_count(); });
  m.def(
      "_set_synchronize",
      [](py::object fn) {
        // kept for the life of the process: the guard may call it from any thread
        delete g_synchronize;
        g_synchronize = new py::object(std::move(fn));
        set_synchronize_hook(&synchronize_from_guard);
      },
      py::arg("fn"),
      "The function the device guard calls to synchronize a device (index -> None).");
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
