// The reference device's kernels in C++: the same three kinds as kernels.py, without
// the Python interpreter on the path of every operator call.
//
// - compute kernels: device tensors become CPU aliases of the same memory, the CPU
//   kernel runs (the operator is called again: the dispatcher picks the CPU kernel),
//   and results come back as device tensors (an input returned is the device input
//   itself; a view of an input is a device view; a new result takes ownership of the
//   CPU buffer, no copy);
// - metadata kernels (view, as_strided, ...): the CPU kernel over the device tensor;
// - memory kernels: empty, empty_strided and _copy_from, and the device's allocator.
// An operator the Python side marks `delegated` (a fault profile names it, or a poison
// rule counts every operator), and an out= call whose outputs must grow (but an output
// with no memory yet, which takes the CPU result here), is handed to the Python kernel
// registered for the same operator under the PrivateUse2 key.
// Built and loaded by native.py; kernels.py registers which operator gets which kind.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/as_strided_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

const c10::Device kDevice(c10::DeviceType::PrivateUse1, 0);
const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
const c10::DispatchKeySet kPythonKernelKeys(c10::DispatchKey::PrivateUse2);

// Never destroyed: both must outlive the interpreter's and the dispatcher's teardown.
torch::Library* kernels_library = nullptr;
std::unordered_set<std::string> cross_device_ops;
std::unordered_set<std::string> delegated;  // "packet.overload" or "packet"
std::atomic<bool> delegate_all{false};
std::once_flag prepared;
py::object* prepare_callback = nullptr;

bool is_device(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A CPU tensor over a device tensor's memory, valid while the device tensor lives.
at::Tensor as_cpu(const at::Tensor& device) {
  const c10::Storage& storage = device.storage();
  c10::Storage alias(
      c10::Storage::use_byte_size_t(), storage.nbytes(),
      c10::DataPtr(storage.mutable_data(), c10::Device(c10::DeviceType::CPU)),
      /*allocator=*/nullptr, /*resizable=*/false);
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(alias), kCpuKeys, device.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(
      device.sizes(), device.strides(), device.storage_offset());
  if (device.is_conj()) tensor._set_conj(true);
  if (device.is_neg()) tensor._set_neg(true);
  return tensor;
}

// A device storage that takes over a CPU storage's buffer (the buffer lives as long as
// the device storage does).
c10::Storage device_storage(const c10::Storage& storage) {
  auto* keep = new c10::Storage(storage);
  c10::DataPtr pointer(
      storage.mutable_data(), keep,
      [](void* context) { delete static_cast<c10::Storage*>(context); }, kDevice);
  return c10::Storage(
      c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(pointer),
      /*allocator=*/nullptr, /*resizable=*/false);
}

// A device tensor that takes over a CPU tensor's buffer.
at::Tensor to_device(const at::Tensor& cpu) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      device_storage(cpu.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      cpu.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(
      cpu.sizes(), cpu.strides(), cpu.storage_offset());
  if (cpu.is_conj()) tensor._set_conj(true);
  if (cpu.is_neg()) tensor._set_neg(true);
  return tensor;
}

std::string qualified(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  std::string packet = name.name.substr(name.name.find("::") + 2);
  return name.overload_name.empty() ? packet : packet + "." + name.overload_name;
}

std::string packet_of(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name().name;
  return name.substr(name.find("::") + 2);
}

// Load the fault profile once (the Python side answers which operators it needs).
void prepare() {
  std::call_once(prepared, [] {
    py::gil_scoped_acquire gil;
    if (prepare_callback != nullptr) (*prepare_callback)();
  });
}

bool is_delegated(const c10::OperatorHandle& op) {
  if (delegate_all.load()) return true;
  if (delegated.empty()) return false;
  return delegated.count(packet_of(op)) || delegated.count(qualified(op));
}

void python_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(kPythonKernelKeys, stack);
}

struct Aliases {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;  // (cpu alias, device tensor)
  // out= arguments with no memory yet (what composite operators such as abs pass): the
  // CPU kernel gets a fresh CPU tensor it may resize, and the device tensor takes its
  // buffer afterwards. A CPU alias of no memory cannot grow, and that path (an error,
  // then the Python kernel) costs a few hundred microseconds.
  std::vector<std::pair<at::Tensor, at::Tensor>> fresh_outs;  // (cpu tensor, device out)
};

bool is_fresh_out(const c10::Argument& argument, const c10::IValue& value) {
  if (!argument.is_out() || !value.isTensor()) return false;
  const at::Tensor& out = value.toTensor();
  return is_device(out) && out.storage().nbytes() == 0 && !out.is_conj() && !out.is_neg() &&
         out.unsafeGetTensorImpl()->allow_tensor_metadata_change();
}

c10::IValue fresh_cpu_out(const at::Tensor& out, Aliases& aliases) {
  at::Tensor cpu = at::empty({0}, out.options().device(c10::DeviceType::CPU));
  aliases.fresh_outs.emplace_back(cpu, out);
  aliases.pairs.emplace_back(cpu, out);
  return cpu;
}

// The device out takes the CPU kernel's result: its buffer, sizes and strides.
void adopt_fresh_outs(const Aliases& aliases) {
  for (const auto& [cpu, device] : aliases.fresh_outs) {
    c10::TensorImpl* impl = device.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(device_storage(cpu.storage()));
    impl->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
  }
}

c10::IValue cpu_argument(const c10::IValue& value, Aliases& aliases) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!is_device(tensor)) return value;
    at::Tensor alias = as_cpu(tensor);
    aliases.pairs.emplace_back(alias, tensor);
    return alias;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& tensor : value.toTensorList()) {
      if (is_device(tensor)) {
        at::Tensor alias = as_cpu(tensor);
        aliases.pairs.emplace_back(alias, tensor);
        out.push_back(alias);
      } else {
        out.push_back(tensor);
      }
    }
    return out;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& item : value.toOptionalTensorList()) {
      if (item.has_value() && is_device(*item)) {
        at::Tensor alias = as_cpu(*item);
        aliases.pairs.emplace_back(alias, *item);
        out.push_back(alias);
      } else {
        out.push_back(item);
      }
    }
    return out;
  }
  if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::CPU);
  }
  return value;
}

void check_same_device(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  auto complain = [&](const at::Tensor& t) {
    if (t.defined() && t.device().is_cpu() && t.dim() > 0) {
      TORCH_CHECK(
          false,
          "Expected all tensors to be on the same device, but found at least two devices, "
          "privateuseone:0 and cpu! (in aten::", qualified(op), ")");
    }
  };
  for (const auto& value : args) {
    if (value.isTensor()) {
      complain(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) complain(t);
    } else if (value.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : value.toOptionalTensorList()) {
        if (t.has_value()) complain(*t);
      }
    }
  }
}

at::Tensor device_result(const at::Tensor& result, const Aliases& aliases) {
  if (!result.defined() || !result.device().is_cpu()) return result;
  TORCH_CHECK_NOT_IMPLEMENTED(
      result.has_storage(), "reference device: a ", result.layout(), " result has no storage");
  for (const auto& [alias, device] : aliases.pairs) {
    if (result.unsafeGetTensorImpl() == alias.unsafeGetTensorImpl()) return device;
  }
  const void* pointer = result.storage().data();
  if (pointer != nullptr) {
    for (const auto& [alias, device] : aliases.pairs) {
      if (device.storage().data() == pointer) {
        TORCH_CHECK_NOT_IMPLEMENTED(
            device.dtype() == result.dtype(),
            "reference device: dtype-changing view through a compute kernel");
        return at::_ops::as_strided::redispatch(
            kCpuKeys, device, result.sym_sizes(), result.sym_strides(),
            result.sym_storage_offset());
      }
    }
  }
  return to_device(result);
}

c10::IValue device_value(const c10::IValue& value, const Aliases& aliases) {
  if (value.isTensor()) return device_result(value.toTensor(), aliases);
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(device_result(t, aliases));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& item : value.toTupleRef().elements()) {
      items.push_back(device_value(item, aliases));
    }
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

bool has_out_arguments(const c10::OperatorHandle& op) {
  for (const auto& argument : op.schema().arguments()) {
    if (argument.is_out()) return true;
  }
  return false;
}

// One per operator: what it may mix and whether Python runs it are looked up once.
class ComputeKernel final : public c10::OperatorKernel {
 public:
  void operator()(
      const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    if (state_.load() == kUnknown) {
      prepare();
      cross_device_ = cross_device_ops.count(packet_of(op)) > 0;
      state_.store(is_delegated(op) ? kPython : kNative);
    }
    if (state_.load() == kPython) return python_kernel(op, stack);
    run(op, stack);
  }

 private:
  static constexpr int kUnknown = 0, kNative = 1, kPython = 2;
  std::atomic<int> state_{kUnknown};
  bool cross_device_ = false;

  void run(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto& arguments = op.schema().arguments();
    const size_t count = arguments.size();
    Aliases aliases;
    torch::jit::Stack cpu_stack;
    cpu_stack.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const c10::IValue& value = (*stack)[stack->size() - count + i];
      cpu_stack.push_back(
          is_fresh_out(arguments[i], value) ? fresh_cpu_out(value.toTensor(), aliases)
                                            : cpu_argument(value, aliases));
    }
    if (!aliases.pairs.empty() && !cross_device_) {
      check_same_device(op, std::vector<c10::IValue>(stack->end() - count, stack->end()));
    }
    try {
      op.callBoxed(&cpu_stack);
    } catch (const c10::Error& error) {
      // Not what(): it symbolizes the C++ backtrace, about 100 ms a call. Composite
      // operators (abs, the unary ops) call their out= form with an empty output, so
      // this path is common.
      std::string what = error.what_without_backtrace();
      if (what.find("not resizable") == std::string::npos || !has_out_arguments(op)) throw;
      // Outputs that must grow: the Python kernel computes into CPU outputs, copies back.
      return python_kernel(op, stack);
    }
    adopt_fresh_outs(aliases);
    torch::jit::drop(*stack, count);
    for (auto& value : cpu_stack) stack->push_back(device_value(value, aliases));
  }
};

void metadata_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(kCpuKeys, stack);
}

at::Tensor empty_memory_format(
    c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
    std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>,
    std::optional<at::MemoryFormat> memory_format) {
  auto options = at::TensorOptions().dtype(dtype).device(c10::DeviceType::CPU);
  auto cpu = at::empty(
      C10_AS_INTARRAYREF_SLOW(size), options,
      memory_format.value_or(at::MemoryFormat::Contiguous));
  return to_device(cpu);
}

at::Tensor empty_strided(
    c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
    std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  auto options = at::TensorOptions().dtype(dtype).device(c10::DeviceType::CPU);
  return to_device(at::empty_strided(
      C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), options));
}

at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool) {
  at::Tensor target = is_device(dst) ? as_cpu(dst) : dst;
  target.copy_(is_device(src) ? as_cpu(src) : src);
  return dst;
}

// Storages made by size on the device (`UntypedStorage(n, device=...)`, what deepcopy
// and clone of a storage do) take their memory from the device's allocator: CPU memory,
// as every device buffer here is.
struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr cpu = c10::GetCPUAllocator()->allocate(bytes);
    void* data = cpu.get();
    c10::DeleterFnPtr deleter = cpu.get_deleter();
    void* context = cpu.release_context();
    return c10::DataPtr(data, context, deleter, kDevice);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return c10::GetCPUAllocator()->raw_deleter();
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

DeviceAllocator device_allocator;

torch::Library& library() {
  if (kernels_library == nullptr) {
    kernels_library = new torch::Library(
        torch::Library::IMPL, "aten", std::make_optional(c10::DispatchKey::PrivateUse1),
        __FILE__, __LINE__);
  }
  return *kernels_library;
}

void register_compute(const std::string& name) {
  library().impl(
      name.c_str(),
      torch::CppFunction::makeFromBoxedFunctor(std::make_unique<ComputeKernel>()));
}

void register_metadata(const std::string& name) {
  library().impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&metadata_kernel>());
}

void register_memory() {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator);
  library().impl("empty.memory_format", TORCH_FN(empty_memory_format));
  library().impl("empty_strided", TORCH_FN(empty_strided));
  library().impl("_copy_from", TORCH_FN(copy_from));
}

void configure(
    std::vector<std::string> cross_device, py::object callback) {
  cross_device_ops = {cross_device.begin(), cross_device.end()};
  prepare_callback = new py::object(std::move(callback));
}

void set_delegated(std::vector<std::string> names, bool all) {
  delegated = {names.begin(), names.end()};
  delegate_all.store(all);
}

}  // namespace

PYBIND11_MODULE(crcr_refdev_native, m) {
  m.doc() = "The reference device's kernels in C++ (see native.py)";
  m.def("configure", &configure, "cross-device operators and the fault-profile callback");
  m.def("set_delegated", &set_delegated, "operators the Python kernels run, or all of them");
  m.def("register_compute", &register_compute);
  m.def("register_metadata", &register_metadata);
  m.def("register_memory", &register_memory);
}
