// torch_argon._C.plan_fresh: the eager functional plan in one allocation (plan_fresh.cpp).
#pragma once
#include <Python.h>

namespace argon {

// plan_fresh(plan_type, library, topk_ids, topk_weights, n_expert, tile_m) -> the plan, a
// plan_type (MoEPlan) whose seven tensors are views of one fresh buffer, or None where the op
// must make the plan instead.
PyObject* plan_fresh(PyObject* module, PyObject* const* args, Py_ssize_t nargs);

}  // namespace argon
