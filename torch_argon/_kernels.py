"""Facts about this build and this GPU that the Experts' supports() read, written so that
torch.compile(fullgraph=True) folds them into constants: Dynamo cannot trace the dispatcher's
query (a torch._C call returning a bool) nor torch.cuda.get_device_capability / _name, while it
folds the device properties."""
import torch


def has_kernel(op: str, dispatch_key: str) -> bool:
    """Whether this process has a kernel of `op` ("argon::name") for `dispatch_key`: the test
    build (torch_argon._C_test) may register CPU kernels after import, so it is asked each time
    in eager (a dispatcher lookup) and once per compiled graph."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, dispatch_key)


# What torch.compiler.assume_constant_result(has_kernel) does (Dynamo calls it while tracing and
# keeps the answer as a constant), without importing torch._dynamo, and Triton with it, when
# torch_argon is imported (tests/test_import_time.py); tests/test_refusals_compile.py fails
# where a torch release stops honouring it.
has_kernel._dynamo_marked_constant = True


def cuda_capability(device: torch.device) -> tuple:
    """(major, minor) of a CUDA device."""
    p = torch.cuda.get_device_properties(device)
    return p.major, p.minor
