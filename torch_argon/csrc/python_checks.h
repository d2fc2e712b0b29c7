// _C's Python functions over the argument checks (python_checks.cpp), added to the module by
// module.cpp. Free of torch's headers, as module.cpp is.
#pragma once
#include <Python.h>

namespace argon {

// Adds _C.meta, _C.checks and _C.refuse_gradient to `module`: 0, or -1 with a Python error set.
int add_python_checks(PyObject* module);

}  // namespace argon
