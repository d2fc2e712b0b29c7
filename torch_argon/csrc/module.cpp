// The Python module torch_argon._C. It exports no functions: importing it runs the static
// op registrations (TORCH_LIBRARY blocks) of every backend compiled into the library.
#include <Python.h>

static PyModuleDef argon_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&argon_module); }
