# Sourced by the bench scripts that run on the lent GPU machines.
# The H200 image's Python loads an older libstdc++ first; formatting a number in an error
# message then crashes (seen in every build there). The system one fixes it.
if [ -f /lib/x86_64-linux-gnu/libstdc++.so.6 ]; then
  export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6
fi
# The GPU runs test the Metal kernels as metal_host and metal_cuda too: build the test executors
# (torch_argon._C_test) along with _C.
export ARGON_TEST_BUILD=1
