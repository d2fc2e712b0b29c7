// The Python module torch_argon._C. Importing it runs the static op registrations
// (TORCH_LIBRARY blocks) of every backend compiled into the library. Its one function is the
// eager plan's fast path (plan_fresh.cpp), which cannot be an op.
#include <Python.h>

#include "plan_fresh.h"

static PyMethodDef argon_methods[] = {
    {"plan_fresh", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(argon::plan_fresh)),
     METH_FASTCALL,
     "plan_fresh(plan_type, library, topk_ids, topk_weights, n_expert, tile_m): the plan as a "
     "plan_type (MoEPlan), its seven tensors views of one fresh buffer, or None where the op "
     "must make the plan (see plan_fresh.cpp)."},
    {nullptr, nullptr, 0, nullptr}};

static PyModuleDef argon_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, argon_methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&argon_module); }
