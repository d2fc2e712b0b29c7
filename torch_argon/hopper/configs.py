"""The Hopper GEMMs' tile configurations and which one a GEMM gets.

CONFIGS lists the configurations the unit is compiled with, in the order of csrc/hopper/
hopper_gemm.h (the index is the op's `config` argument): the consumer schedule, the CTA tile
M x N (K step 64) and the cluster along M.

MEASURED is the tuned table: per (GPU name, dtype name), rows of (largest mean rows per expert,
gate/up config, down config), the first row whose bound is >= the call's rows per expert wins.
A row whose configs are None is a band of rows per expert where the path measured slower than
triton_dense or level with it. It holds only what a benchmark on that GPU measured
(bench/bench_hopper.py writes the rows for it). It is empty: where the path was measured
(MEASURED_SLOWER) it lost to triton_dense. The layer's automatic choice takes a Hopper
implementation only where its table has a row with configurations for the call's GPU, dtype and
rows per expert (auto_decline; experts/cuda_hopper_dense.py); by name
(path="cuda_hopper_dense") it runs everywhere it can, with default_config's rule where the table
has no row with configurations.
"""
CONFIGS = (
    "pingpong_64x128",       # ping-pong warpgroups, tile 64 x 128, cluster 1 x 1
    "pingpong_128x128",      # ping-pong warpgroups, tile 128 x 128, cluster 1 x 1
    "cooperative_128x256",   # cooperative warpgroups, tile 128 x 256, cluster 2 x 1
)

# {(torch.cuda.get_device_name(), dtype name): ((max rows per expert, gate_up, down), ...)}
MEASURED = {}
# {(GPU name, dtype name): the run} where the path was measured and lost to triton_dense at
# every point, so MEASURED has no rows for it on purpose
MEASURED_SLOWER = {
    ("NVIDIA H200", "bfloat16"): "bench/results/h200_hopper.json (2026-12-06)",
    ("NVIDIA H100 80GB HBM3", "bfloat16"): "bench/results/h100_hopper.json (2026-12-06)",
}


def index(name: str) -> int:
    """The op's config argument for a configuration's name."""
    if name not in CONFIGS:
        raise ValueError(f"config must be one of {CONFIGS}, got {name!r}")
    return CONFIGS.index(name)


def default_config(rows_per_expert: float) -> str:
    """The rule where nothing is measured: a tile of M 64 while an expert's rows fill no more
    (less padding in the last M tile of each expert), else 128 x 128 ping-pong. From the H200's
    GEMM-alone rates (bench/results/h200_hopper.json): 64 x 128 led at 40 rows per expert,
    128 x 128 at 128 and 512 (507 / 469 TFLOP/s against the cooperative 128 x 256's 486 / 404
    at 512); the cooperative tile led only the gate/up GEMM at 160 rows (415 against 357)."""
    if rows_per_expert <= 64:
        return "pingpong_64x128"
    return "pingpong_128x128"


def _lookup(table, rows_per_expert, device_name, dtype_name):
    """The (gate_up, down) of the table's first row for this GPU and dtype whose bound holds
    the call's rows per expert ((None, None) in a band measured slower), or None."""
    for bound, gate_up, down in table.get((device_name, dtype_name), ()):
        if rows_per_expert <= bound:
            return gate_up, down
    return None


def auto_decline(table, rows_per_expert, device_name, dtype_name) -> str:
    """Why the automatic choice passes by a path on a GPU and dtype its table has rows for (the
    end of a sentence), or "" where a row with configurations holds the call's mean rows per
    expert. rows_per_expert None (unknown before routing) declines where the table has a band."""
    rows = table.get((device_name, dtype_name), ())
    bands = [bound for bound, gate_up, _ in rows if gate_up is None]
    slower = "it measured slower than triton_dense or level with it up to {:g} rows per expert"
    if rows_per_expert is None:
        return slower.format(max(bands)) if bands else ""
    for bound, gate_up, _ in rows:
        if rows_per_expert <= bound:
            return slower.format(bound) if gate_up is None else ""
    return f"its tuned table ends at {rows[-1][0]:g} rows per expert" if rows else ""


def choose(rows_per_expert: float, device_name: str, dtype_name: str):
    """(gate_up config, down config) for a call of this many mean rows per expert: the tuned
    table's row for it where the GPU and dtype are measured, else default_config for both."""
    found = _lookup(MEASURED, rows_per_expert, device_name, dtype_name)
    if found and found[0] is not None:
        return found
    rule = default_config(rows_per_expert)
    return rule, rule


# ---- the padded GEMM (argon::hopper_padded_mm: one tensor map per operand over a plan of
# tile_m 128; csrc/hopper/hopper_padded_gemm.h lists its configurations in this order) ---------

PADDED_TILE_M = 128  # the plan's tile_m: the M of every padded configuration
PADDED_CONFIGS = (
    "pingpong_128x128",      # ping-pong warpgroups, tile 128 x 128, cluster 1 x 1
    "cooperative_128x256",   # cooperative warpgroups, tile 128 x 256, cluster 1 x 1
)
# The padded GEMM's tuned table, in MEASURED's format. The H100 (bf16; bench/results/
# h100_hopper_run2.json and h100_hopper_run3.json, 2026-12-06, the path with this table's
# configurations): up to 320 mean rows per expert it was slower than triton_dense or level
# (with the tile order's per-launch window 1.00-1.47x its time at E=512 T = 4096-16384; with
# windows of 4, the order before, 1.49x / 1.60x at E=512 T = 2048 / 8192 and 1.29x at E=128
# T=2048; at E=128 T=4096, 256 rows, 0.97x, left in the band since E=512's 320 rows were level),
# above it faster (0.81-0.88x at E=128 T = 6144 / 8192 / 16384). Gate/up on the cooperative 128 x 256 tile (it led at every point above
# 128 rows), down on ping-pong 128 x 128 (within 1 % of the cooperative tile there).
PADDED_MEASURED = {
    ("NVIDIA H100 80GB HBM3", "bfloat16"): (
        (320, None, None),
        (float("inf"), "cooperative_128x256", "pingpong_128x128")),
}
# {(GPU name, dtype name): the run} that measured the padded path slower than triton_dense at
# every point (its table left empty on purpose), or in the table's bands of None rows
PADDED_MEASURED_SLOWER = {
    ("NVIDIA H100 80GB HBM3", "bfloat16"): "bench/results/h100_hopper_run2.json (2026-12-06)",
}


def padded_index(name: str) -> int:
    """The padded op's config argument for a configuration's name."""
    if name not in PADDED_CONFIGS:
        raise ValueError(f"config must be one of {PADDED_CONFIGS}, got {name!r}")
    return PADDED_CONFIGS.index(name)


def choose_padded(rows_per_expert: float, device_name: str, dtype_name: str):
    """(gate_up config, down config) of the padded GEMM: PADDED_MEASURED's row where it has
    one with configurations, else (another GPU or dtype, or a band measured slower, which only
    path="cuda_hopper_padded" runs) the rule from the H100's GEMM-alone rates (bench/results/
    h100_hopper.json and h100_hopper_run2.json, bf16): gate/up on the cooperative 128 x 256
    tile above 128 rows per expert (it led at every measured point above 128: e.g. 705 against
    813 us at E=128 T=8192), ping-pong 128 x 128 up to 128 (the runs disagree there: 402 against
    411 us at 128 rows in the first, 402 against 399 in the second; at 40 rows 952 against 957,
    then 1064 against 1017 with windows of 4); down on ping-pong 128 x 128 (level with the
    cooperative tile or ahead)."""
    found = _lookup(PADDED_MEASURED, rows_per_expert, device_name, dtype_name)
    if found and found[0] is not None:
        return found
    gate_up = "cooperative_128x256" if rows_per_expert > 128 else "pingpong_128x128"
    return gate_up, "pingpong_128x128"


# ---- the activation in the padded gate/up GEMM's epilogue (argon::hopper_padded_act_mm) -------

# Whether the gate/up GEMM with the activation fused (csrc/hopper/hopper_padded_act_epilogue.cuh)
# has passed its GPU tests (tests/test_hopper_padded_act.py: h bit for bit the unfused GEMM +
# swiglu's, every configuration, dtype and activation, graphs, opcheck). Built and checked on the
# host only (2026-12-06: compiled, SASS, the pairing probe): until a device run passes them,
# cuda_hopper_padded keeps its unfused stages (gate/up GEMM into gu, the swiglu op, down)
# unless FUSE_ACTIVATION says otherwise.
FUSED_ACTIVATION_PASSED_GPU_TESTS = False

# Whether the fused GEMM reads a second, interleaved copy of the gate/up stack (it does: 805 MB
# per layer in bf16 at E=128 H=2048 I=768, ~38 GB over a 48-layer Qwen3-30B-A3B whose bf16
# experts take ~61 GB: a model that fits an 80 GB GPU unfused would not fused). While it does, the
# default stays unfused even once the GPU tests pass: fusion is the caller's choice
# (FUSE_ACTIVATION = True) where the memory is there. Reading the original stack in interleaved
# order (a TMA tensor map with the N mode split into (8 rows, gate / up, I / 8 blocks)) would
# remove the copy and let the default follow the tests.
FUSED_ACTIVATION_NEEDS_A_COPY = True

# The switch the GPU tests, the benchmark and a caller with the memory set: None follows the two
# flags above (fused once the GPU tests pass and no copy is needed), True fuses wherever the fused
# GEMM can run (the tests of the fused path, bench_hopper's fused column), False never. A module attribute rather
# than an environment variable: it is read at every call, set and restored by the caller
# (pytest's monkeypatch, the benchmark), and shows in no process environment.
FUSE_ACTIVATION = None


def fuse_activation() -> bool:
    """Whether cuda_hopper_padded runs its gate/up GEMM with the activation fused (where the
    call allows it: experts/cuda_hopper_padded.py fused_gate_up_refusal)."""
    if FUSE_ACTIVATION is not None:
        return bool(FUSE_ACTIVATION)
    return FUSED_ACTIVATION_PASSED_GPU_TESTS and not FUSED_ACTIVATION_NEEDS_A_COPY
