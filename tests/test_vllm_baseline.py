"""The vLLM fused_moe benchmark baseline (bench/baselines/): its staging, its argument checks, and
on the CPU through the Triton interpreter (fp16: the interpreter's bf16 dots are wrong, see
tests/triton_interpreter_run.py) its output against torch_argon.reference, its glue ops against
plain torch, vLLM's config choice, and the side-by-side benchmark script's dry run.

The interpreter checks need vLLM's kernel file staged (`bash bench/baselines/stage_vllm.sh`, CI
does it); without it they skip, saying so. Run as a script (`python tests/test_vllm_baseline.py`)
this file is the interpreter process: it prints one JSON line {check: [failures]}.
"""
import io
import json
import os
import subprocess
import sys
import zipfile

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if __name__ == "__main__":  # the interpreter process: before triton is imported
    sys.path[:0] = [HERE, ROOT]
    from torch_argon.testing.triton_interpreter import enable
    enable()
else:
    sys.path.insert(0, ROOT)

from bench.baselines import vllm_fused_moe  # noqa: E402

ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
# fp16 GEMMs (fp32 accumulation) against float64: ~1e-3 seen; a wrong half or weight is O(1)
REL_TOL = 5e-3


STAGED_REASON = vllm_fused_moe.staging_problem()  # the interpreter process runs it on the CPU
needs_staged = pytest.mark.skipif(bool(STAGED_REASON), reason=STAGED_REASON or "ok")


# ---- in the pytest process ---------------------------------------------------------------------

def test_available_says_how_to_stage_when_nothing_is_staged(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGON_VLLM_DIR", str(tmp_path))
    ok, why = vllm_fused_moe.available()
    assert not ok and "stage_vllm.sh" in why and str(tmp_path) in why
    with pytest.raises(RuntimeError, match="stage_vllm.sh"):
        vllm_fused_moe.kernel_module()


def test_available_refuses_an_unknown_version(tmp_path, monkeypatch):
    (tmp_path / "VERSION.json").write_text(json.dumps({"vllm": "0.1.0"}))
    monkeypatch.setenv("ARGON_VLLM_DIR", str(tmp_path))
    ok, why = vllm_fused_moe.available()
    assert not ok and "0.1.0" in why and vllm_fused_moe.KNOWN_VERSIONS[0] in why


@pytest.mark.parametrize("shapes,arg", [
    (((4, 64, 32), (4, 32, 16)), "w_down"),        # down's width is not half of gate/up's rows
    (((4, 63, 32), (4, 32, 31)), "w_down"),        # odd gate/up rows
    (((4, 64), (4, 32, 32)), "w_gate_up"),         # not a stack
])
def test_make_experts_names_the_bad_weight(shapes, arg):
    w_gate_up, w_down = (torch.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=arg):
        vllm_fused_moe.make_experts(w_gate_up, w_down, "silu", torch.float16, "cpu")


def test_make_experts_names_a_bad_activation():
    with pytest.raises(ValueError, match="activation"):
        vllm_fused_moe.make_experts(torch.zeros(2, 8, 4), torch.zeros(2, 4, 4), "relu",
                                    torch.float16, "cpu")


def _fake_wheel(path, version, with_kernel=True):
    """A zip laid out as vLLM's wheel, with the members stage_vllm.sh takes and some it leaves."""
    pkg = "vllm/model_executor/layers/fused_moe/"
    members = {f"vllm-{version}.dist-info/licenses/LICENSE": "Apache",
               pkg + "moe_align_block_size.py": "# align",
               pkg + "configs/E=512,N=512,device_name=NVIDIA_H200.json": '{"1": {}}',
               pkg + "configs/E=512,N=512,device_name=NVIDIA_H200,dtype=fp8_w8a8.json": "{}",
               pkg + "configs/E=128,N=768,device_name=NVIDIA_H200.json": '{"1": {}}',
               pkg + "configs/E=64,N=768,device_name=NVIDIA_H200.json": "{}",
               pkg + "layer.py": "# not taken"}
    if with_kernel:
        members[pkg + "fused_moe.py"] = "# kernel"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)


def test_stage_script_takes_the_kernel_files_and_our_shapes_bf16_configs(tmp_path):
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    _fake_wheel(wheel, "9.9.9")
    dest = tmp_path / "staged"
    out = subprocess.run(["bash", os.path.join(ROOT, "bench/baselines/stage_vllm.sh"), "9.9.9",
                          str(dest)], env=dict(os.environ, VLLM_WHEEL=str(wheel)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    record = json.loads((dest / "VERSION.json").read_text())
    assert record["vllm"] == "9.9.9" and len(record["wheel_sha256"]) == 64
    assert sorted(record["files"]) == sorted([
        "LICENSE", "fused_moe/fused_moe.py", "fused_moe/moe_align_block_size.py",
        "fused_moe/configs/E=512,N=512,device_name=NVIDIA_H200.json",
        "fused_moe/configs/E=128,N=768,device_name=NVIDIA_H200.json"])
    assert (dest / "fused_moe" / "fused_moe.py").read_text() == "# kernel"


def test_stage_script_refuses_a_wheel_without_the_kernel_file(tmp_path):
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    _fake_wheel(wheel, "9.9.9", with_kernel=False)
    out = subprocess.run(["bash", os.path.join(ROOT, "bench/baselines/stage_vllm.sh"), "9.9.9",
                          str(tmp_path / "staged")],
                         env=dict(os.environ, VLLM_WHEEL=str(wheel)), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "fused_moe.py" in out.stderr


@pytest.fixture(scope="module")
def interpreter_results():
    env = dict(os.environ, TRITON_INTERPRET="1", ARGON_VLLM_DEVICE_NAME="")
    out = subprocess.run([sys.executable, os.path.abspath(__file__)], capture_output=True,
                         text=True, env=env, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_staged
@pytest.mark.parametrize("check", [
    *(f"parity:{d}:silu" for d in ("uniform", "zipf", "one_expert", "repeated", "empty")),
    "parity:uniform:gelu", "parity:uniform:gelu_tanh", "parity:T=0", "parity:T=1",
    "align:bs16", "align:bs64", "align:one_expert", "align:skips_out_of_range",
    "act_and_mul", "moe_sum:k2", "moe_sum:k8",
    "config:tuned_file", "config:default_rule", "bench_dry_run"])
def test_vllm_baseline_interpreter(interpreter_results, check):
    assert interpreter_results[check] == []


# ---- the interpreter process -------------------------------------------------------------------

def _experts(E, H, I, seed):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).half(),
            (torch.randn(E, H, I, generator=g) * I ** -0.5).half())


def _parity(dist, activation, T=16, E=8, K=2, H=64, I=32):
    """vLLM's path against reference.moe_layer (float64) on the same routing; the output
    buffer vLLM fills is torch.empty, so garbage there would show."""
    from torch_argon import reference
    from torch_argon.testing.layers import relative_error
    from torch_argon.testing.routing import make_ids, make_weights
    w_gate_up, w_down = _experts(E, H, I, seed=T)
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(1)).half()
    ids = make_ids(T, K, E, dist, seed=3).int()
    w = make_weights(T, K, seed=4)
    y = vllm_fused_moe.make_experts(w_gate_up, w_down, activation, torch.float16, "cpu")(
        x, w, ids)
    ref = reference.moe_layer(x.double(), None, (w_gate_up, w_down), K, topk_ids=ids,
                              topk_weights=w, activation=activation)
    fails = []
    if y.shape != (T, H) or y.dtype != torch.float16:
        fails.append(f"output {tuple(y.shape)} {y.dtype}, want ({T}, {H}) float16")
    elif not bool(torch.isfinite(y).all()):
        fails.append("non-finite output")
    elif relative_error(y, ref) > REL_TOL:
        fails.append(f"relative error {relative_error(y, ref):.3g} > {REL_TOL}")
    return fails


def _align(ids, E, bs):
    """The alignment's outputs against the padded-run layout they must have."""
    from torch_argon.testing.routing import make_ids  # noqa: F401 (path set up)
    fm = vllm_fused_moe.kernel_module()
    sorted_ids, expert_ids, total = fm.moe_align_block_size(ids, bs, E, None,
                                                            ignore_invalid_experts=True)
    flat = ids.reshape(-1).long()
    n = flat.numel()
    fails, start = [], 0
    counts = torch.bincount(flat[(flat >= 0) & (flat < E)], minlength=E)
    for e in range(E):
        c = int(counts[e])
        padded = -(-c // bs) * bs
        run = sorted_ids[start:start + padded].long()
        want = (flat == e).nonzero().reshape(-1)
        if sorted(run[:c].tolist()) != want.tolist():
            fails.append(f"expert {e}: entries {run[:c].tolist()}, want {want.tolist()}")
        if not bool((run[c:] == n).all()):
            fails.append(f"expert {e}: padding {run[c:].tolist()}, want the sentinel {n}")
        blocks = expert_ids[start // bs:(start + padded) // bs]
        if not bool((blocks == e).all()):
            fails.append(f"expert {e}: block experts {blocks.tolist()}")
        start += padded
    if int(total) != start:
        fails.append(f"num_tokens_post_pad {int(total)}, want {start}")
    return fails


def _act_and_mul():
    from bench.baselines import vllm_glue
    fails = []
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(37, 2 * 48, generator=g) * 3).half()
    want = {"silu": torch.nn.functional.silu,
            "gelu": torch.nn.functional.gelu,
            "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}
    for act, fn in want.items():
        out = torch.full((37, 48), float("nan"), dtype=torch.float16)
        vllm_glue.act_and_mul(act, out, x)
        ref = (fn(x[:, :48].float()).half().float() * x[:, 48:].float()).half()
        if not torch.allclose(out.float(), ref.float(), rtol=2e-3, atol=2e-3):
            fails.append(f"{act}: max diff {(out.float() - ref.float()).abs().max():.3g}")
    return fails


def _moe_sum(k):
    from bench.baselines import vllm_glue
    y = torch.randn(9, k, 24, generator=torch.Generator().manual_seed(k)).half()
    out = torch.full((9, 24), float("nan"), dtype=torch.float16)
    vllm_glue.moe_sum(y, out)
    want = y.float().sum(1)
    return ([] if torch.allclose(out.float(), want, rtol=5e-3, atol=5e-3) else
            [f"max diff {(out.float() - want).abs().max():.3g}"])


def _config(device_name, E, N, M, want_source):
    """vLLM's choice: the tuned file's entry nearest M, or its default rule."""
    os.environ["ARGON_VLLM_DEVICE_NAME"] = device_name
    try:
        w1, w2 = torch.empty(E, 2 * N, 2048, device="meta"), torch.empty(E, 2048, N, device="meta")
        config, source = vllm_fused_moe.chosen_config(w1, w2, 8, torch.bfloat16, M)
    finally:
        os.environ["ARGON_VLLM_DEVICE_NAME"] = ""
    fails = []
    if want_source == "default":
        fm = vllm_fused_moe.kernel_module()
        want = fm.get_default_config(M, E, N, 2048, 8, None)
    else:
        path = os.path.join(vllm_fused_moe.staged_dir(), "fused_moe", "configs", want_source)
        with open(path) as f:
            table = {int(k): v for k, v in json.load(f).items() if k != "triton_version"}
        want = table[min(table, key=lambda m: abs(m - M))]
    if source != want_source:
        fails.append(f"source {source}, want {want_source}")
    if config != want:
        fails.append(f"config {config}, want {want}")
    return fails


def _bench_dry_run():
    import tempfile
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench_vllm_side_by_side as bench
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.json")
        rc = bench.main(["--tiny", "--device", "cpu", "--T", "16", "--configs", "E512",
                         "--paths", "ops_dense,no_such_path", "--json", path,
                         "--rounds", "1"])
        with open(path) as f:
            records = json.load(f)
    rows = {r["impl"]: r for r in records if r["op"] == "vllm_side_by_side"}
    errors = {r["impl"] for r in records if r["op"] == "vllm_side_by_side_error"}
    fails = []
    if rc != 1:
        fails.append(f"exit status {rc}, want 1 (one path raised)")
    if set(rows) != {"argon:auto", "argon:ops_dense", "vllm"}:
        fails.append(f"rows {sorted(rows)}")
    if errors != {"argon:no_such_path"}:
        fails.append(f"error rows {sorted(errors)}")
    for name, r in rows.items():
        if "wrong" in r or not r["median_us"] > 0:
            fails.append(f"{name}: {r}")
    if rows.get("vllm", {}).get("vllm_config_source") != "default":
        fails.append("vllm row: no config source")
    with tempfile.TemporaryDirectory() as d:  # a spent budget: every point an error row
        path = os.path.join(d, "out.json")
        rc = bench.main(["--tiny", "--device", "cpu", "--T", "16,40", "--configs", "E512",
                         "--json", path, "--budget-s", "0"])
        with open(path) as f:
            skipped = [r for r in json.load(f) if r["op"] == "vllm_side_by_side_error"]
    if rc != 1 or [r["T"] for r in skipped] != [16, 40] or "budget" not in skipped[0]["error"]:
        fails.append(f"--budget-s 0: exit {rc}, error rows {skipped}")
    return fails


def _interpreter_checks():
    from torch_argon.testing.routing import make_ids
    checks = {f"parity:{d}:silu": lambda d=d: _parity(d, "silu")
              for d in ("uniform", "zipf", "one_expert", "repeated", "empty")}
    checks.update({
        "parity:uniform:gelu": lambda: _parity("uniform", "gelu"),
        "parity:uniform:gelu_tanh": lambda: _parity("uniform", "gelu_tanh"),
        "parity:T=0": lambda: _parity("uniform", "silu", T=0),
        "parity:T=1": lambda: _parity("uniform", "silu", T=1),
        "align:bs16": lambda: _align(make_ids(40, 3, 16, "uniform", seed=1).int(), 16, 16),
        "align:bs64": lambda: _align(make_ids(40, 3, 16, "zipf", seed=2).int(), 16, 64),
        "align:one_expert": lambda: _align(make_ids(33, 2, 8, "one_expert", seed=3), 8, 16),
        "align:skips_out_of_range": lambda: _align(
            torch.tensor([[0, -1], [7, 3], [-1, 3]], dtype=torch.int32), 8, 16),
        "act_and_mul": _act_and_mul,
        "moe_sum:k2": lambda: _moe_sum(2),
        "moe_sum:k8": lambda: _moe_sum(8),
        "config:tuned_file": lambda: _config(
            "NVIDIA H200", 512, 512, 3000, "E=512,N=512,device_name=NVIDIA_H200.json"),
        "config:default_rule": lambda: _config("NVIDIA H100 80GB HBM3", 128, 768, 2048,
                                               "default"),
        "bench_dry_run": _bench_dry_run,
    })
    results = {}
    for name, check in checks.items():
        try:
            results[name] = check()
        except Exception as e:  # noqa: BLE001 (reported as the check's failure)
            import traceback
            traceback.print_exc()
            results[name] = [f"{type(e).__name__}: {e}"]
    return results


if __name__ == "__main__":
    print(json.dumps(_interpreter_checks()))
