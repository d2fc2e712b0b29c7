"""Runs tests/triton_cases.py under the Triton interpreter on the CPU and prints one JSON line
{case: [failures]}. Started by tests/test_triton_mm.py in a subprocess, because
TRITON_INTERPRET must be set before triton is imported.

fp16 only: Triton 3.6's interpreter multiplies bf16 operands of tl.dot as raw bits (seen here:
errors of 1e10), so bf16 is checked on CUDA alone; the kernels' logic is dtype-independent.
"""
import json

import triton_interpreter_setup  # noqa: F401  (first: sets TRITON_INTERPRET)
import torch  # noqa: E402

from torch_argon.testing import backends  # noqa: E402
from triton_cases import (CASES, VARIANT_CASES, run_case, run_corrupt_tokens_case,  # noqa: E402
                          run_shipped_case, run_topk_case, shipped_case_name,
                          shipped_config_pairs)

results = {name: run_case(name, "cpu", torch.float16, backends.get("cpu").ops)
           for name in CASES}
results.update({f"{v}:{c}": run_case(c, "cpu", torch.float16, backends.get("cpu").ops, variant=v)
                for v, c in VARIANT_CASES})  # the Hopper kernel's variants
results.update({shipped_case_name(*p): run_shipped_case(*p, "cpu", torch.float16,
                                                         backends.get("cpu").ops)
                for p in shipped_config_pairs()})  # every config of the shipped table
results["topk"] = run_topk_case("cpu")
results["corrupt_tokens"] = run_corrupt_tokens_case("cpu")
print(json.dumps(results))
