"""Runs tests/quant_triton_cases.py under the Triton interpreter on the CPU and prints one JSON
line {case: [failures]} (last line of stdout; the seconds per case go to stderr). Started by
tests/test_quant_triton.py in subprocesses (each with a share of the cases: arguments name
them), because TRITON_INTERPRET must be set before triton is imported.
"""
import json
import sys
import time

import triton_interpreter_setup  # noqa: F401  (first: sets TRITON_INTERPRET)
from quant_triton_cases import interpreter_cases  # noqa: E402

if __name__ == "__main__":
    only = sys.argv[1:]  # case names to run (all without)
    results, times = {}, {}
    for name, fn in interpreter_cases():
        if only and name not in only:
            continue
        t0 = time.time()
        results[name] = fn()
        times[name] = round(time.time() - t0, 2)
    print(json.dumps(times), file=sys.stderr)
    print(json.dumps(results))
