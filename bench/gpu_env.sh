# Sourced by the bench scripts that run on the lent GPU machines.
# The H200 image's Python loads an older libstdc++ first; formatting a number in an error
# message then crashes (seen in every build there). The system one fixes it.
if [ -f /lib/x86_64-linux-gnu/libstdc++.so.6 ]; then
  export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6
fi
# The GPU runs test the Metal kernels as metal_host and metal_cuda too: build the test executors
# (torch_argon._C_test) along with _C.
export ARGON_TEST_BUILD=1
# CUTLASS's headers for the Hopper unit, from the nvidia-cutlass wheel carried in .whl/
# (`python3 -m pip download --no-deps nvidia-cutlass==4.2.0.0 -d .whl`), for every script alike:
# setup.py rebuilds by file times only and would not notice the unit appearing or going away
# between two scripts' builds. Without the wheel the build has no Hopper GEMM and says why.
if [ -z "${ARGON_CUTLASS_DIR:-}" ]; then
  cutlass_whl=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -n 1)
  if [ -n "$cutlass_whl" ]; then
    [ -d /tmp/argon_cutlass/cutlass_library ] ||
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/argon_cutlass \
        "$cutlass_whl"
    export ARGON_CUTLASS_DIR=/tmp/argon_cutlass/cutlass_library/source
  fi
fi
# gguf (PyPI, pure Python) for bench_gguf.py's model file, from a wheel carried in .whl/ where
# the image has none (`python3 -m pip download --no-deps gguf -d .whl`): the GPU machines have
# no network.
if ! python3 -c "import gguf" 2>/dev/null; then
  gguf_whl=$(ls .whl/gguf-*.whl 2>/dev/null | head -n 1)
  if [ -n "$gguf_whl" ]; then
    [ -d /tmp/argon_gguf/gguf ] ||
      python3 -m pip install -q --no-index --no-deps --target /tmp/argon_gguf "$gguf_whl"
    export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/argon_gguf"
  fi
fi
