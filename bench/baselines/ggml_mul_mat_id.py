"""llama.cpp's MoE GEMMs on the GGUF bytes, as a benchmark baseline: ggml's MUL_MAT_ID timed by
its own test-backend-ops (perf mode), built by bench/baselines/build_ggml_cuda.sh with
bench/baselines/ggml_mul_mat_id_cases.patch, which makes it run exactly the shapes we ask for.

    python bench/baselines/ggml_mul_mat_id.py BINARY --formats Q4_K,IQ2_XS --T 128,2048
    rows = layer_times(BINARY, [MoEShape(E=128, K=8, H=2048, I=768)], ["Q4_K"], [128, 2048])

What one MoE layer costs there, as llama.cpp's graph runs it (llama-graph.cpp, build_moe_ffn):
  gate  MUL_MAT_ID(weights [E, I, H], activations [H, 1, T] broadcast to the K experts)
  up    the same shape again (a second call: llama.cpp's gate and up are separate tensors)
  down  MUL_MAT_ID(weights [E, H, I], activations [I, K, T], one row per (token, expert))
Each call takes f32 activations, quantizes them to q8_1 inside the op (as llama.cpp does), sorts
the rows by expert and runs the MMQ kernels (other kernels for float weights); ggml picks the
kernel. Routing: test_mul_mat_id's, K distinct experts per token drawn uniformly. Weights: rows
drawn at random from a pool of rows that ggml quantized from uniform random values (the patch
says why). Time: test-backend-ops' perf loop, the op repeated in one graph for >= 1 s of
wall-clock time, us per op (its "time_us").

The binary's output is read as the SQL it prints (--output sql: a CREATE TABLE and one INSERT per
case), loaded into an in-memory SQLite database: a change of its fields or their order is caught
by name, not by position.
"""
import argparse
import os
import re
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The environment variable the patch reads: "type,n_mats,n_used,b,m,n,k" cases separated by ';'.
CASES_ENV = "ARGON_MUL_MAT_ID_CASES"
HERE = Path(__file__).resolve().parent
DEFAULT_CUDA_BINARY = HERE / "ggml_bin" / "test-backend-ops-cuda"
DEFAULT_CPU_BINARY = HERE / "ggml_bin" / "test-backend-ops-cpu"


class GgmlRunError(RuntimeError):
    """test-backend-ops failed, or printed something that is not its result table."""


@dataclass(frozen=True)
class MoEShape:
    """One MoE layer's experts: E experts, K per token, hidden size H, intermediate size I."""
    E: int
    K: int
    H: int
    I: int  # noqa: E741 (the name every table of the project uses)


@dataclass(frozen=True)
class Case:
    """One MUL_MAT_ID call: `n_mats` weight matrices [m, k] of ggml type `ggml_type`, T=n tokens
    each using n_used of them; broadcast: one activation row per token (gate/up), else one per
    (token, expert) (down)."""
    ggml_type: str
    n_mats: int
    n_used: int
    broadcast: bool
    m: int
    n: int
    k: int

    def spec(self):
        return (f"{self.ggml_type},{self.n_mats},{self.n_used},{int(self.broadcast)},"
                f"{self.m},{self.n},{self.k}")

    def op_params(self):
        """The `op_params` text test-backend-ops prints for this case (test_mul_mat_id's vars)."""
        return (f"type_a={self.ggml_type},type_b=f32,n_mats={self.n_mats},n_used={self.n_used},"
                f"b={int(self.broadcast)},m={self.m},n={self.n},k={self.k}")


def ggml_type_name(fmt):
    """ggml's name of a GGUF format named as torch_argon names it ("Q4_K" -> "q4_K",
    "IQ2_XS" -> "iq2_xs", "BF16" -> "bf16"): lower case, except the K of the k-quants."""
    name = fmt.lower()
    return name[:-2] + "_K" if name.endswith("_k") else name


def layer_cases(shape, fmt, T):
    """(gate, down) of one layer at T tokens; up is gate's shape (timed once, counted twice)."""
    t = ggml_type_name(fmt)
    gate = Case(t, shape.E, shape.K, True, shape.I, T, shape.H)
    down = Case(t, shape.E, shape.K, False, shape.H, T, shape.I)
    return gate, down


def parse_sql(text):
    """The result rows of test-backend-ops' `--output sql` text: a list of dicts by field name.
    Raises GgmlRunError when the text holds no result table."""
    create = re.search(r"^CREATE TABLE IF NOT EXISTS test_backend_ops \(.*?^\);", text,
                       re.M | re.S)
    if create is None:
        raise GgmlRunError("no 'CREATE TABLE test_backend_ops' in test-backend-ops' output: "
                           f"was it run with --output sql? It printed: {text[-2000:]!r}")
    inserts = re.findall(r"^INSERT INTO test_backend_ops .*;$", text, re.M)
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(create.group(0) + "\n" + "\n".join(inserts))
        cur = db.execute("SELECT * FROM test_backend_ops")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
    except sqlite3.Error as e:
        raise GgmlRunError(f"test-backend-ops' SQL did not load: {e}") from e
    finally:
        db.close()


def library_path():
    """LD_LIBRARY_PATH for the binary: the CUDA runtime and cuBLAS of the NVIDIA wheels this
    Python has (those torch loads), ahead of the caller's, so a binary built on another machine
    (its RUNPATH names that machine's folders) finds this machine's."""
    try:
        import nvidia
        dirs = [str(p) for d in nvidia.__path__ for p in sorted(Path(d).glob("*/lib"))
                if any(p.glob("libcublas.so*"))]
    except ImportError:
        dirs = []
    return os.pathsep.join(dirs + [os.environ.get("LD_LIBRARY_PATH", "")]).strip(os.pathsep)


def run_cases(binary, cases, backend="CUDA0", timeout=None):
    """Times `cases` with the test-backend-ops at `binary` on ggml backend `backend` ("CUDA0",
    "CPU"). Returns {case: row} (row: the result's fields by name; time_us in us per call).
    Raises GgmlRunError when the binary fails, or a case is missing or unsupported."""
    binary = Path(binary)
    if not binary.is_file():
        raise GgmlRunError(f"no test-backend-ops at {binary} "
                           "(bench/baselines/build_ggml_cuda.sh builds it)")
    cases = list(dict.fromkeys(cases))
    env = dict(os.environ, LD_LIBRARY_PATH=library_path(),
               **{CASES_ENV: ";".join(c.spec() for c in cases)})
    try:
        p = subprocess.run([str(binary), "perf", "-o", "MUL_MAT_ID", "-b", backend, "--output",
                            "sql"], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise GgmlRunError(f"{binary.name} did not finish {len(cases)} cases in {timeout} s") from e
    if p.returncode != 0:
        raise GgmlRunError(f"{binary.name} exited with {p.returncode}: "
                           f"{(p.stdout[-1500:] + p.stderr[-1500:]).strip()}")
    rows = {r["op_params"]: r for r in parse_sql(p.stdout)
            if r["op_name"] == "MUL_MAT_ID" and r["test_mode"] == "perf"}
    out = {}
    for c in cases:
        r = rows.get(c.op_params())
        if r is None:
            raise GgmlRunError(f"test-backend-ops printed no result for {c.op_params()} on "
                               f"{backend} (it printed {sorted(rows)})")
        if not r["supported"] or float(r["time_us"]) <= 0:
            raise GgmlRunError(f"{backend} does not run {c.op_params()}: "
                               f"{r['error_message'] or 'not supported'}")
        out[c] = r
    return out


def ggml_commit(binary):
    """The ggml commit the binary was built from (the GGML_COMMIT file the build put beside
    it), or "unknown"."""
    f = Path(binary).parent / "GGML_COMMIT"
    return f.read_text().strip() if f.is_file() else "unknown"


def layer_times(binary, shapes, formats, Ts, backend="CUDA0", timeout=None):
    """llama.cpp's experts GEMMs of each (shape, format, T), in one run of the binary: a list of
    {"E", "K", "H", "I", "T", "quant", "gate_us", "up_us", "down_us", "gate_up_us", "total_us",
    "ggml_type", "device", "ggml_commit"} (us per call; gate_up_us = gate + up; device: ggml's
    description of it, or the backend's name where it has none, as the CPU's)."""
    wanted = {(s, f, T): layer_cases(s, f, T) for s in shapes for f in formats for T in Ts}
    timed = run_cases(binary, [c for pair in wanted.values() for c in pair], backend, timeout)
    commit = ggml_commit(binary)
    rows = []
    for (s, f, T), (gate, down) in wanted.items():
        gate_us = round(float(timed[gate]["time_us"]), 2)
        down_us = round(float(timed[down]["time_us"]), 2)
        rows.append(dict(E=s.E, K=s.K, H=s.H, I=s.I, T=T, quant=f, ggml_type=gate.ggml_type,
                         gate_us=gate_us, up_us=gate_us, down_us=down_us,
                         gate_up_us=round(2 * gate_us, 2), total_us=round(2 * gate_us + down_us, 2),
                         device=timed[gate]["device_description"] or backend,
                         ggml_commit=commit))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", nargs="?", default=str(DEFAULT_CUDA_BINARY))
    ap.add_argument("--backend", default="CUDA0", help="ggml backend name (CUDA0, CPU)")
    ap.add_argument("--formats", default="Q4_K,Q8_0,IQ4_XS,Q6_K,IQ2_XS")
    ap.add_argument("--shapes", default="128,8,2048,768;512,10,2048,512",
                    help="E,K,H,I of each layer, separated by ';'")
    ap.add_argument("--T", default="128,512,2048,8192")
    args = ap.parse_args(argv)
    shapes = [MoEShape(*(int(v) for v in s.split(","))) for s in args.shapes.split(";")]
    rows = layer_times(args.binary, shapes, args.formats.split(","),
                       [int(t) for t in args.T.split(",")], args.backend)
    print(f"llama.cpp MUL_MAT_ID (ggml {rows[0]['ggml_commit'][:10]}, {rows[0]['device']}; us)")
    print(f"{'E':>4s} {'K':>3s} {'H':>5s} {'I':>5s} {'quant':7s} {'T':>6s} {'gate+up':>9s} "
          f"{'down':>9s} {'total':>9s}")
    for r in rows:
        print(f"{r['E']:4d} {r['K']:3d} {r['H']:5d} {r['I']:5d} {r['quant']:7s} {r['T']:6d} "
              f"{r['gate_up_us']:9.1f} {r['down_us']:9.1f} {r['total_us']:9.1f}")


if __name__ == "__main__":
    main()
