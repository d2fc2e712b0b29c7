"""GGUF prefill on the CPU: torch_argon's from_gguf against llama.cpp (through llama-cpp-python, a
benchmark baseline only: bench/requirements-llamacpp.txt) on the same files, in one run.

    pip install -r bench/requirements-llamacpp.txt     # builds llama.cpp from source (long)
    python bench/bench_gguf_llamacpp.py                # bench/results/cpu_gguf_llamacpp.json
    python bench/bench_gguf_llamacpp.py --formats Q4_K Q8_0 --T 512 --rounds 2

The files: complete Qwen3-30B-A3B-shaped qwen3moe models written with gguf's writer
(tests/gguf_files.py: token embedding, attention with q/k norms, router, experts, final norm,
output head, a small gpt2-style tokenizer in the metadata), hidden 2048, 128 experts, top-8,
expert width 768, 2 blocks, random blocks with finite scales, every expert tensor in the format
under test (attention Q8_0), one format at a time (written to a temporary directory, deleted after).

Per format, worker processes each load the file once and then prefill on command: llama.cpp with
its CPU weight repacking on and off (llama-bench's --repack 1 / 0; its best counts), and argon
with float32 and bfloat16 activations, with activation_quant "none" (the layer today) and "q8"
(moe_qmm's integer path; the layer's option is being added elsewhere, so the worker sets it on
the op wrapper the layer calls). A prefill is one forward of T tokens of one sequence from an
empty cache (llama.cpp: Llama.eval after reset, n_batch = T, its default micro-batch 512; argon:
model(ids, use_cache=False) under torch.no_grad). Rounds interleave every worker and T (each
warmed up first), medians over --rounds; the machine is shared, so the load average is recorded
per format. Records: {"format", "T", "dtype", "threads", "activation_quant",
"argon_tokens_per_s", "llamacpp_tokens_per_s", ...} with llama.cpp's best of repack on/off and
each of its two settings.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = dict(E=128, K=8, H=2048, I=768, n_head=32, n_kv_head=4, head_dim=128)
FORMATS = ("Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_0", "Q5_0", "IQ4_XS", "IQ4_NL", "MXFP4", "Q3_K",
           "IQ3_S", "Q2_K", "IQ2_XS")


# ---- workers: load once, then answer "T mode" lines with the seconds of one prefill ----------

def llama_worker(args):
    import llama_cpp

    repack = args.config == "llamacpp_repack"
    defaults = llama_cpp.llama_model_default_params

    def model_params():
        p = defaults()
        if hasattr(p, "use_extra_bufts"):  # llama.cpp's CPU repacking (llama-bench --repack)
            p.use_extra_bufts = repack
        return p

    llama_cpp.llama_model_default_params = model_params
    if not repack and not hasattr(defaults(), "use_extra_bufts"):
        print(json.dumps({"error": "this llama.cpp has no repack switch"}), flush=True)
        return
    llm = llama_cpp.Llama(model_path=args.file, n_ctx=max(args.T) + 8, n_batch=max(args.T),
                          n_threads=args.threads, n_threads_batch=args.threads, verbose=False)

    def prefill(ids, mode):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        return time.perf_counter() - t0

    serve(args, prefill)


def argon_worker(args):
    import torch

    sys.path[:0] = [ROOT]
    from torch_argon.integrations.gguf_transformers import from_gguf
    from torch_argon.ops import OpSet

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.config.split("_")[1])
    model = from_gguf(args.file, dtype=dtype)
    exact_qmm = OpSet.moe_qmm
    mode_now = {"mode": "none"}

    def moe_qmm(self, *a, activation_quant="none", **kw):
        return exact_qmm(self, *a, activation_quant=mode_now["mode"], **kw)

    OpSet.moe_qmm = moe_qmm  # what the layer's activation_quant option will pass

    def prefill(ids, mode):
        mode_now["mode"] = mode
        x = torch.tensor([ids])
        with torch.no_grad():
            t0 = time.perf_counter()
            model(x, use_cache=False)
            return time.perf_counter() - t0

    serve(args, prefill)


def serve(args, prefill):
    import random
    rng = random.Random(0)
    ids = {T: [rng.randrange(2, args.vocab) for _ in range(T)] for T in args.T}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        T, mode = line.split()
        print(json.dumps({"s": prefill(ids[int(T)], mode)}), flush=True)


# ---- the run ---------------------------------------------------------------------------------

class Worker:
    def __init__(self, config, file, args):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", config, "--file", file,
               "--threads", str(args.threads), "--vocab", str(args.vocab),
               "--T", *map(str, args.T)]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.config = config
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        first = json.loads(self.proc.stdout.readline() or '{"error": "died while loading"}')
        self.error = first.get("error")

    def run(self, T, mode):
        self.proc.stdin.write(f"{T} {mode}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.config} worker died")
        return json.loads(line)["s"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def write_file(path, fmt, args):
    """The test suite's model writer with one BPE merge in the tokenizer: llama.cpp refuses a
    gpt2 tokenizer without merges ("cannot find tokenizer merges"), transformers takes either."""
    import gguf

    sys.path[:0] = [ROOT]
    from torch_argon.testing.gguf_files import write_model_file
    add_merges = gguf.GGUFWriter.add_token_merges
    gguf.GGUFWriter.add_token_merges = lambda self, merges: add_merges(self, list(merges) or
                                                                        ['! "'])
    try:
        write_model_file(path, "qwen3moe", n_blocks=args.layers, vocab=args.vocab,
                         expert_formats=(fmt, fmt, fmt), **SHAPE)
    finally:
        gguf.GGUFWriter.add_token_merges = add_merges


def bench_format(fmt, args, tmp):
    path = os.path.join(tmp, f"qwen3moe-{fmt}.gguf")
    write_file(path, fmt, args)
    file_mb = os.path.getsize(path) / 2**20
    configs = [f"argon_{d}" for d in args.dtypes] + ["llamacpp_repack", "llamacpp_norepack"]
    workers = [w for w in (Worker(c, path, args) for c in configs) if w.error is None]
    cases = [(w, T, mode) for w in workers for T in args.T
             for mode in (args.modes if w.config.startswith("argon") else ("-",))]
    load0 = os.getloadavg()[0]
    times = {c: [] for c in cases}
    for w, T, mode in cases:  # warm-up
        w.run(T, mode)
    for _ in range(args.rounds):
        for c in cases:
            times[c].append(c[0].run(c[1], c[2]))
    load1 = os.getloadavg()[0]
    for w in workers:
        w.close()
    os.remove(path)
    tps = {(w.config, T, mode): T / statistics.median(times[(w, T, mode)])
           for w, T, mode in cases}
    records = []
    for T in args.T:
        llama = {c: tps.get((c, T, "-")) for c in ("llamacpp_repack", "llamacpp_norepack")}
        best = max(v for v in llama.values() if v is not None)
        for d in args.dtypes:
            for mode in args.modes:
                ours = tps.get((f"argon_{d}", T, mode))
                if ours is None:
                    continue
                records.append(dict(
                    format=fmt, T=T, dtype=d, threads=args.threads, activation_quant=mode,
                    argon_tokens_per_s=round(ours, 1), llamacpp_tokens_per_s=round(best, 1),
                    ratio=round(ours / best, 3),
                    llamacpp_repack_tokens_per_s=llama["llamacpp_repack"] and round(
                        llama["llamacpp_repack"], 1),
                    llamacpp_norepack_tokens_per_s=llama["llamacpp_norepack"] and round(
                        llama["llamacpp_norepack"], 1),
                    rounds=args.rounds, layers=args.layers, **SHAPE, vocab=args.vocab,
                    file_mb=round(file_mb, 1), load_average=[round(load0, 1), round(load1, 1)]))
    return records


def machine_info():
    import platform

    import llama_cpp
    import torch

    sys.path[:0] = [ROOT]
    import torch_argon  # noqa: F401 (the argon_cpu ops)
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return dict(cpu_model=model, argon_cpu_isa=torch.ops.argon_cpu.isa(),
                llama_cpp_python=llama_cpp.__version__,
                llama_cpp_system_info=llama_cpp.llama_print_system_info().decode().strip())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--formats", nargs="+", default=list(FORMATS))
    p.add_argument("--T", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--modes", nargs="+", default=["none", "q8"], help="argon activation_quant")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--json", default=os.path.join(ROOT, "bench", "results",
                                                  "cpu_gguf_llamacpp.json"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.config = args.worker
        return (argon_worker if args.worker.startswith("argon") else llama_worker)(args)

    info = machine_info()
    print(json.dumps(info), flush=True)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats:
            for r in bench_format(fmt, args, tmp):
                r.update(info)
                records.append(r)
                print(json.dumps(r), flush=True)
            with open(args.json, "w") as f:  # kept as it grows: a long run leaves its part
                json.dump(records, f, indent=1)
    print(f"\n| format | T | dtype | activation_quant | argon tok/s | llama.cpp tok/s | ratio |"
          f"\n|---|---:|---|---|---:|---:|---:|")
    for r in records:
        print(f"| {r['format']} | {r['T']} | {r['dtype']} | {r['activation_quant']} | "
              f"{r['argon_tokens_per_s']} | {r['llamacpp_tokens_per_s']} | {r['ratio']}x |")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
