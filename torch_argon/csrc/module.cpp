// The Python module torch_argon._C. Importing it runs the static op registrations
// (TORCH_LIBRARY blocks) of every backend compiled into the library. Its functions: the op
// names of the table (op_table.h), from which the Python side derives its op list, the eager
// plan's fast path (plan_fresh.cpp), which cannot be an op, and the argument checks for Python
// code (python_checks.cpp: the ops' fakes among them).
#include <Python.h>

#include "op_table.h"
#include "plan_fresh.h"
#include "python_checks.h"
#include "quant_formats.h"

// op_names() -> tuple of the functional op names, in table order (each also has a _out form).
static PyObject* op_names(PyObject*, PyObject*) {
#define ARGON_OP_NAME(name, schema, out_schema, Fn, OutFn) #name,
  static const char* const names[] = {ARGON_OPS(ARGON_OP_NAME)};
#undef ARGON_OP_NAME
  const Py_ssize_t n = sizeof(names) / sizeof(names[0]);
  PyObject* tuple = PyTuple_New(n);
  if (tuple == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* name = PyUnicode_FromString(names[i]);
    if (name == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, i, name);
  }
  return tuple;
}

// quant_formats() -> tuple of (name, ggml type id, block elems, block bytes, has kernels), the
// C++ format table (quant_formats.h), for the test that it agrees with torch_argon.quant.
static PyObject* quant_formats(PyObject*, PyObject*) {
  const Py_ssize_t n = sizeof(argon::kQuantFormats) / sizeof(argon::kQuantFormats[0]);
  PyObject* tuple = PyTuple_New(n);
  if (tuple == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const argon::QuantFormat& f = argon::kQuantFormats[i];
    PyObject* row = Py_BuildValue("(siiiO)", f.name, f.type_id, f.block_elems, f.block_bytes,
                                  f.has_kernels ? Py_True : Py_False);
    if (row == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, i, row);
  }
  return tuple;
}

static PyMethodDef argon_methods[] = {
    {"op_names", op_names, METH_NOARGS,
     "op_names(): the functional argon op names, in the op table's order (each has a _out form)."},
    {"plan_fresh", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(argon::plan_fresh)),
     METH_FASTCALL,
     "plan_fresh(plan_type, library, topk_ids, topk_weights, n_expert, tile_m): the plan as a "
     "plan_type (MoEPlan), its seven tensors views of one fresh buffer, or None where the op "
     "must make the plan (see plan_fresh.cpp)."},
    {"quant_formats", quant_formats, METH_NOARGS,
     "quant_formats(): the C++ table of GGUF formats, as (name, type id, block elems, block "
     "bytes, has kernels) tuples."},
    {nullptr, nullptr, 0, nullptr}};

static PyModuleDef argon_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, argon_methods};

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* module = PyModule_Create(&argon_module);
  if (module != nullptr && argon::add_python_checks(module) != 0) Py_CLEAR(module);
  return module;
}
