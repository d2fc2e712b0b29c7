// The eager fast path of the functional plan: torch_argon.moe_plan(ids, w, E, tm) without out=.
//
// Why: the op's functional form allocates its seven outputs one by one, and on the lent H200's
// host each allocation and free through the caching allocator costs 1-2 us
// (bench/lab/eager_cost.py: seven of them 6.9-12.3 us, where launching a tiny torch op costs
// 6.8-10.9). With one allocation, and the MoEPlan built here, the call costs 1.18-1.39x a
// tiny op, against 1.9-2.3x for the op (bench/plan_cuda_notes.md, sessions 21 and 22).
// Here the seven outputs are views of ONE fresh buffer, each starting on a 128-byte boundary,
// and the plan is written by the op library's moe_plan_out (any backend, through the
// dispatcher). A custom op may not return outputs that share a storage, so this is a plain
// Python function of torch_argon._C, not an op: the Python API calls it only in eager mode
// (never under torch.compile, which traces the op), and it returns None, leaving the call to
// the op, whenever it would behave differently from it: tensor subclasses or Python modes
// (FakeTensorMode, torch.device(...) contexts, ...), dispatch keys switched on for the thread
// (torch.jit.trace, vmap), arguments of other types, devices without our kernels,
// weights that require grad.
// One storage for seven tensors is also what record_stream needs: recorded on any of them, it
// covers the whole buffer, which the caching allocator frees once all seven are gone.
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <deque>
#include <string>
#include <tuple>
#include <utility>

#include "checks.h"
#include "op_signatures.h"
#include "plan_fresh.h"

namespace argon {
namespace {

constexpr int64_t kAlignWords = 32;  // each output starts on a 128-byte boundary

int64_t padded_words(std::initializer_list<int64_t> size) {
  int64_t n = 1;
  for (int64_t s : size) n *= s;
  return (n + kAlignWords - 1) / kAlignWords * kAlignWords;
}

// A contiguous tensor of `size` over `buffer`'s storage, `word` int32 words in.
at::Tensor carve(const at::Tensor& buffer, int64_t word, std::initializer_list<int64_t> size,
                 at::ScalarType dtype) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(buffer.storage()), buffer.key_set(), c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_storage_offset(word);  // int32 and float32: both one word
  t.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  return t;
}

PlanOutputs plan_in_one_buffer(c10::TypedOperatorHandle<PlanOutFn> out_op,
                               const at::Tensor& ids, const at::Tensor& w, int64_t n_expert,
                               int64_t tile_m) {
  const PlanDims d = check_plan_inputs(ids, w, n_expert, tile_m);
  int64_t words = 0;
  make_plan_outputs(d, [&](std::initializer_list<int64_t> size, at::ScalarType) {
    words += padded_words(size);
    return at::Tensor();
  });
  const at::Tensor buffer = at::empty({words}, ids.options().dtype(at::kInt));
  int64_t word = 0;  // make_plan_outputs makes the outputs in contract order (a braced list)
  PlanOutputs out = make_plan_outputs(
      d, [&](std::initializer_list<int64_t> size, at::ScalarType dtype) {
        at::Tensor t = carve(buffer, word, size, dtype);
        word += padded_words(size);
        return t;
      });
  const auto& [counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta] = out;
  out_op.call(ids, w, n_expert, tile_m, counts, offsets, sorted_token, sorted_weight, pos,
              tile_expert, meta);
  return out;
}

// Whether the op would do anything the fast path does not: see the header comment.
bool fast_path_applies(PyObject* ids, PyObject* w, PyObject* n_expert, PyObject* tile_m) {
  if (!THPVariable_CheckExact(ids) || !THPVariable_CheckExact(w)) return false;
  if (!PyLong_CheckExact(n_expert) || !PyLong_CheckExact(tile_m)) return false;
  if (c10::impl::TorchDispatchModeTLS::any_modes_set() || at::impl::torch_function_mode_enabled())
    return false;
  // Dispatch keys switched on for this thread beyond the defaults (the JIT tracer, functorch
  // transforms such as vmap, Python dispatch): whatever they would do to the op, leave it to
  // the op. (Autocast, which un-excludes keys, does nothing to integer plans.)
  const auto switched_on =
      c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set;
  if (!switched_on.empty()) return false;
  const at::Tensor& t = THPVariable_Unpack(ids);
  const auto type = t.device().type();
  if (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA &&
      type != c10::DeviceType::MPS)
    return false;
  return !(c10::GradMode::is_enabled() && THPVariable_Unpack(w).requires_grad());
}

// The moe_plan_out handle of op library `lib` ("argon", or a test module's library), found once
// per library; nullptr where the library has none. The libraries are few and never unloaded, so
// the handles are kept for the process's life (a deque: the pointers handed out stay valid).
// Called with the GIL held, which guards the table.
const c10::TypedOperatorHandle<PlanOutFn>* plan_out_op(const char* lib) {
  static std::deque<std::pair<std::string, c10::TypedOperatorHandle<PlanOutFn>>> found;
  for (const auto& [name, op] : found) {
    if (name == lib) return &op;
  }
  const auto handle =
      c10::Dispatcher::singleton().findSchema({std::string(lib) + "::moe_plan_out", ""});
  if (!handle.has_value()) return nullptr;
  found.emplace_back(lib, handle->typed<PlanOutFn>());
  return &found.back().second;
}

// The plan as an instance of `plan_type` (a tuple subclass of eight fields: the seven tensors,
// then tile_m), made here as tuple.__new__ makes one, without the named tuple's Python __new__
// (callgrind, CPU, T = 1: that call was 3.8K of the Python API's 32K instructions per call).
// nullptr, with the error set, if Python runs out of memory.
PyObject* wrap_plan(PyTypeObject* plan_type, PlanOutputs&& out, PyObject* tile_m) {
  PyObject* tuple = plan_type->tp_alloc(plan_type, 8);
  if (tuple == nullptr) return nullptr;
  Py_INCREF(tile_m);
  PyTuple_SET_ITEM(tuple, 7, tile_m);
  Py_ssize_t i = 0;
  bool ok = true;
  std::apply(
      [&](auto&... t) {
        ((ok = ok && (PyTuple_SET_ITEM(tuple, i, THPVariable_Wrap(std::move(t))),
                      PyTuple_GET_ITEM(tuple, i++) != nullptr)),
         ...);
      },
      out);
  if (!ok) Py_DECREF(tuple);  // a tuple's dealloc skips the items never set
  return ok ? tuple : nullptr;
}

}  // namespace

PyObject* plan_fresh(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 6 || !PyType_Check(args[0]) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(args[0]), &PyTuple_Type) ||
      !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "plan_fresh(plan_type: a tuple type, library: str, topk_ids, topk_weights, "
                    "n_expert, tile_m)");
    return nullptr;
  }
  const auto plan_type = reinterpret_cast<PyTypeObject*>(args[0]);
  args += 1;  // the rest as before the plan type came first
  const char* lib = PyUnicode_AsUTF8(args[0]);
  if (lib == nullptr) return nullptr;
  const c10::TypedOperatorHandle<PlanOutFn>* op = plan_out_op(lib);
  if (op == nullptr) {
    PyErr_Format(PyExc_ValueError, "plan_fresh: no op library '%s' with a moe_plan_out", lib);
    return nullptr;
  }
  if (!fast_path_applies(args[1], args[2], args[3], args[4])) Py_RETURN_NONE;
  const int64_t n_expert = PyLong_AsLongLong(args[3]);
  const int64_t tile_m = PyLong_AsLongLong(args[4]);
  if (PyErr_Occurred()) return nullptr;  // an int beyond 64 bits
  const at::Tensor& ids = THPVariable_Unpack(args[1]);
  const at::Tensor& w = THPVariable_Unpack(args[2]);
  PlanOutputs out;
  {
    pybind11::gil_scoped_release no_gil;  // as torch's own ops do around their kernels
    out = plan_in_one_buffer(*op, ids, w, n_expert, tile_m);
  }
  return wrap_plan(plan_type, std::move(out), args[4]);
  END_HANDLE_TH_ERRORS
}

}  // namespace argon
