// The Python module torch_argon._C_test: the test executors, built by scripts/test.sh and CI
// (ARGON_TEST_BUILD=1), never by a user's install. Importing it runs the static registrations of
// its op libraries: `argon_host` (the .metal kernels run on host threads: backend metal_host)
// and, in CUDA builds, `argon_metal_cuda` (the .metal kernels compiled by nvcc). It has no
// functions; torch_argon/testing/backends.py loads it when it exists.
#include <Python.h>

static PyModuleDef argon_test_module = {PyModuleDef_HEAD_INIT, "_C_test",
                                        "torch_argon's test executors (op libraries argon_host, "
                                        "argon_metal_cuda)", -1, nullptr};

PyMODINIT_FUNC PyInit__C_test(void) { return PyModule_Create(&argon_test_module); }
