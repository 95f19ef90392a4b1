// The neuron device's activity profiler for Kineto (ProfilerActivity.PrivateUse1).
//
// PyTorch 2.13 lets a PrivateUse1 backend register a libkineto::IActivityProfiler
// (torch/csrc/profiler/standalone/privateuse1_profiler.h). Kineto configures it
// when a profile asks for the PrivateUse1 activity, pushes each recorded CPU op's
// correlation id to its session, and at the end asks the session for its
// activities, which become the trace's device rows and the ops' device time.
//
// The device runs in Python (jax), so Python measures each launch and hands the
// record here (`record`); this file only keeps records while a session
// records and turns them into Kineto activities linked to their CPU ops.
#include "neuron.h"

// The installed torch is built with Kineto; its headers hide the API otherwise.
#ifndef USE_KINETO
#define USE_KINETO
#endif
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace torch_neuronx {
namespace {

struct Record {
  int kind;
  std::string name;
  int device;
  int64_t start_ns;
  int64_t end_ns;
  int64_t correlation;
};

std::atomic<bool> g_recording{false};
std::mutex g_mutex;
std::vector<Record> g_records; // guarded by g_mutex

// The CPU ops and ranges open on this thread: Kineto pushes each one's
// correlation id to every session at entry and pops it at exit, on the thread
// that runs it. Ops and record_function ranges (USER_SCOPE) are kept apart: a
// range outlives the op that opens it (profiler::_record_function_enter_new,
// seen as PythonDispatchMode under a dispatch mode), so the two do not nest.
// Ids restart with each profile, and a profile can stop with ranges still open
// (their pops never arrive): a thread's stacks belong to one session.
std::atomic<uint64_t> g_session{0};

struct OpenOnThread {
  uint64_t session = 0;
  std::vector<int64_t> ops;
  std::vector<int64_t> ranges;

  OpenOnThread& current() {
    uint64_t now = g_session.load(std::memory_order_relaxed);
    if (session != now) {
      session = now;
      ops.clear();
      ranges.clear();
    }
    return *this;
  }
};
thread_local OpenOnThread t_open;

void pop(std::vector<int64_t>& stack) {
  if (!stack.empty()) { // a pop of one pushed before the session started
    stack.pop_back();
  }
}

// Device rows: one Chrome "process" per device, numbered away from real pids.
constexpr int64_t kDevicePidBase = 1 << 20;

libkineto::ActivityType activity_type(int kind) {
  return kind == kRecordTransfer ? libkineto::ActivityType::GPU_MEMCPY
                                 : libkineto::ActivityType::CONCURRENT_KERNEL;
}

class Session : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_records.clear();
    }
    g_session.fetch_add(1);
    g_recording.store(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    g_recording.store(false);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void pushCorrelationId(uint64_t id) override {
    t_open.current().ops.push_back(static_cast<int64_t>(id));
  }

  void popCorrelationId() override {
    pop(t_open.current().ops);
  }

  void pushUserCorrelationId(uint64_t id) override {
    t_open.current().ranges.push_back(static_cast<int64_t>(id));
  }

  void popUserCorrelationId() override {
    pop(t_open.current().ranges);
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(
      libkineto::ActivityLogger& logger,
      libkineto::getLinkedActivityCallback linked,
      int64_t start_time,
      int64_t end_time) override {
    std::vector<Record> records;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      records.swap(g_records);
    }
    // The activities must outlive the logger's view of them: the trace buffer
    // handed to Kineto (getTraceBuffer) owns them.
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "neuron");
    buffer_->gpuOpCount = static_cast<int>(records.size());
    for (const Record& r : records) {
      if (end_time > start_time && (r.start_ns < start_time || r.end_ns > end_time)) {
        continue; // launched before the profile began, or still running after it ended
      }
      buffer_->emplace_activity(buffer_->span, activity_type(r.kind), r.name);
      auto& act = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
      act.startTime = r.start_ns;
      act.endTime = r.end_ns;
      act.device = static_cast<int32_t>(kDevicePidBase + r.device);
      act.resource = r.kind; // one row per kind: ops, graphs, transfers
      act.id = static_cast<int32_t>(r.correlation);
      act.linked = (linked && r.correlation) ? linked(static_cast<int32_t>(r.correlation)) : nullptr;
      if (act.linked != nullptr) {
        act.flow.id = static_cast<uint32_t>(r.correlation);
        act.flow.type = libkineto::kLinkAsyncCpuGpu;
        act.flow.start = 0;
      }
      act.addMetadataQuoted("device", "neuron:" + std::to_string(r.device));
      act.log(logger);
      if (std::find(devices_.begin(), devices_.end(), r.device) == devices_.end()) {
        devices_.push_back(r.device);
      }
    }
    // Kineto asks a session for one device (getDeviceInfo: the first); name the others here.
    for (size_t i = 1; i < devices_.size(); ++i) {
      logger.handleDeviceInfo(device_info(devices_[i]), start_time);
    }
  }

  static libkineto::DeviceInfo device_info(int device) {
    return libkineto::DeviceInfo{
        kDevicePidBase + device, kDevicePidBase + device, "neuron", "neuron:" + std::to_string(device)};
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(devices_.empty() ? 0 : devices_.front()));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (int d : devices_) {
      const char* names[] = {"ops", "graphs", "transfers"};
      for (int kind = 0; kind < 3; ++kind) {
        out.push_back(libkineto::ResourceInfo{
            kind, kind, kDevicePidBase + d, std::string("neuron:") + std::to_string(d) + " " + names[kind]});
      }
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

 private:
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::vector<int> devices_;
};

class NeuronActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    // Only a profile that asks for the device (ProfilerActivity.PrivateUse1
    // brings CONCURRENT_KERNEL) gets a session: a CPU-only profile pays nothing.
    if (activity_types.count(libkineto::ActivityType::CONCURRENT_KERNEL) == 0) {
      return nullptr;
    }
    return std::make_unique<Session>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/,
      int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"neuron"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY};
};

// The legacy profiler's device timing (torch.autograd.profiler.profile(
// use_device="neuron", use_kineto=False)) asks for an event at each op's entry
// and exit and the time between. With no device-side clock, an event is the
// moment the device has finished everything launched before it: the device is
// synchronized, then the time taken. So an op's elapsed time is its launch to
// ready, like the Kineto records, and what ran before it is not counted.
void synchronize_device(c10::DeviceIndex index) {
  c10::impl::getDeviceGuardImpl(kNeuron)->synchronizeDevice(index);
}

struct LegacyStubs : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event, int64_t* cpu_ns)
      const override {
    c10::DeviceIndex index = current_device();
    if (device != nullptr) {
      *device = index;
    }
    synchronize_device(index);
    if (event != nullptr) {
      *event = std::make_shared<int64_t>(c10::getTime());
    }
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
  }

  float elapsed(
      const torch::profiler::impl::ProfilerVoidEventStub* start,
      const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    const auto* a = static_cast<const int64_t*>(start->get());
    const auto* b = static_cast<const int64_t*>(end->get());
    return static_cast<float>(*b - *a) / 1000.0f; // microseconds, as torch reads every stub's
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    for (int i = 0; i < device_count(); ++i) {
      op(i);
    }
  }

  void synchronize() const override {
    for (int i = 0; i < device_count(); ++i) {
      synchronize_device(static_cast<c10::DeviceIndex>(i));
    }
  }
};

} // namespace

void register_activity_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    static LegacyStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        []() -> std::unique_ptr<libkineto::IActivityProfiler> {
          return std::make_unique<NeuronActivityProfiler>();
        });
  });
}

bool profiler_recording() noexcept {
  return g_recording.load(std::memory_order_relaxed);
}

int64_t profiler_correlation_id() noexcept {
  // Ids grow with each op or range a thread opens: the innermost open one is the larger top.
  OpenOnThread& open = t_open.current();
  int64_t op = open.ops.empty() ? 0 : open.ops.back();
  int64_t range = open.ranges.empty() ? 0 : open.ranges.back();
  return op > range ? op : range;
}

void profiler_record(int kind, std::string name, int device, int64_t start_ns, int64_t end_ns, int64_t correlation) {
  if (!g_recording.load()) {
    return; // the session stopped while this launch ran
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.push_back(Record{kind, std::move(name), device, start_ns, end_ns, correlation});
}

} // namespace torch_neuronx
