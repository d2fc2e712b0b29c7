// The argument checks as Python functions, so that Python code runs the one C++ check of each op
// instead of a copy:
//   _C.meta.<op>, _C.meta.<op>_out  the ops' fakes (ops.py registers them for meta tensors and
//       torch.compile's FakeTensors): the functional forms of functional.h with the checks in
//       place of the kernels, and the _out forms' checks; same arguments as the ops' schemas;
//   _C.checks.tile_plan, _C.checks.dequantize_buffer  checks the Python kernels share (the
//       Triton GEMMs' plan arguments, the out= of a float-format dequantize);
//   _C.refuse_gradient(op, argument)  the autograd refusal of every argon op (autograd_skip.cpp),
//       for the ops defined in Python (the Triton GEMMs).
// Errors surface as the C++ ones do from the ops (ValueError, NotImplementedError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "autograd_refusal.h"
#include "functional.h"
#include "op_table.h"
#include "python_checks.h"

namespace argon {

namespace {

void add_functions(PyObject* module) {
  namespace py = pybind11;
  auto m = py::reinterpret_borrow<py::module_>(module);
  using Fakes = Functional<ChecksOnly>;
  auto meta = m.def_submodule("meta", "The argon ops' fakes: checks, outputs allocated, nothing "
                                      "computed (the schemas' arguments, all positional).");
#define ARGON_BIND_META(name, schema, out_schema, Fn, OutFn)           \
  meta.def(#name, torch::wrap_pybind_function(&Fakes::name));          \
  meta.def(#name "_out", torch::wrap_pybind_function(&ChecksOnly::name##_out));
  ARGON_OPS(ARGON_BIND_META)
#undef ARGON_BIND_META

  auto checks = m.def_submodule("checks", "Argument checks shared with the Python kernels.");
  checks.def("tile_plan",
             torch::wrap_pybind_function(
                 [](const at::Tensor& rows, const std::string& rows_name,
                    const at::Tensor& tile_expert, int64_t tile_m) {
                   check_tile_plan(rows, rows_name.c_str(), tile_expert, tile_m);
                 }),
             "tile_plan(rows, rows_name, tile_expert, tile_m): the grouped GEMMs' plan check.");
  checks.def("dequantize_buffer", torch::wrap_pybind_function(&check_dequantize_buffer),
             "dequantize_buffer(w_q, n_in, out): the out= of a dequantize of w_q's rows.");
  m.def("refuse_gradient",
        torch::wrap_pybind_function([](const std::string& op, const std::string& argument) {
          refuse_gradient(op, argument);
        }),
        "refuse_gradient(op, argument): raises the argon ops' NotImplementedError for an "
        "argument that requires grad.");
}

}  // namespace

int add_python_checks(PyObject* module) {
  try {
    add_functions(module);
    return 0;
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
  }
  return -1;
}

}  // namespace argon
