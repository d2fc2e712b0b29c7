"""Where the CUDA quantized experts change implementation: the mean rows per expert (T * K / E)
from which the layer decodes the experts to bf16 / fp16 once per call and runs the dense GEMMs
(cuda_quantized_dequant) instead of gpuq's GEMMs on the GGUF bytes (cuda_quantized), which
decode each weight once per 32 rows of a tile.

The numbers are the crossovers of the two paths' times in bench/quant_gpuq_notes.md's H100
table (2026-12-05, same-call bf16 baseline): gpuq's GEMMs as measured at T = 128 ... 16384 on
both configs (E=512 K=10 H=2048 I=512; E=128 K=8 H=2048 I=768), the dequant path as the
measured bf16 GEMMs plus the decode modelled as its bytes (the GGUF bytes read, E * 3 * H * I
bf16 values written) over the measured copy bandwidth (2.42 TB/s); both configs cross within
5 rows of each other. The first measurement of both paths (bench/bench_quant.py --quick on an
H100, bench/results/h200_quant.json) brackets every listed format's crossover between 40 rows
(E=512, T=2048: gpuq faster by 1.3-2.0x) and 128 (E=128, T=2048: the dequant path faster by
1.04-1.7x); the modelled values sit inside it except IQ2_XS's, raised to the bracket's middle.

Below it, the rows per expert from which the automatic choice takes the tile-decode GEMM
(cuda_quantized_tiled) and the mixed-input Hopper GEMM (cuda_quantized_mixed), each with
its measurements.
"""

# format -> rows per expert from which the dequant path runs (E512 / E128 crossovers)
DEQUANT_FROM_ROWS = {
    "Q4_K": 55,    # 53.8 / 56.8
    "Q8_0": 42,    # 42.1 / 41.3
    "IQ4_XS": 68,  # 68.3 / 68.5
    "Q6_K": 54,    # 52.5 / 54.9
    "IQ2_XS": 64,  # modelled 38.7 / 42.4; measured: gpuq faster at 40 rows
}
# the formats the table has no row for: the middle of the measured ones
DEFAULT_DEQUANT_FROM_ROWS = 48


def dequant_from_rows(weights) -> float:
    """The rows per expert from which quantized `weights` (QuantizedExperts) run the dequant
    path: the smallest of its parts' formats' crossovers."""
    return min(DEQUANT_FROM_ROWS.get(w.qtype.name, DEFAULT_DEQUANT_FROM_ROWS)
               for w in weights.parts().values())

# format -> rows per expert from which the tile-decode GEMM (cuda_quantized_tiled) runs in the
# layer's automatic choice: the smallest rows per expert from which it beats the other CUDA
# quantized implementations on both configs of a bench/bench_quant.py run on a GPU. Empty: on
# the H200 (2026-12-06; Q4_K and IQ4_XS at T = 2048 and 8192) it took 0.65-1.01x gpuq's time
# from 128 rows per expert, but 1.02-2.4x the layer's choice at every measured point (the dequant
# path from 128 rows), so the automatic choice declines it ("no measured win"; for the formats
# not measured, "not yet measured on a GPU") and path="cuda_quantized_tiled" still runs it.
TILED_FROM_ROWS = {}
# the formats measured with no win (the run), so TILED_FROM_ROWS has no row for them on purpose
TILED_MEASURED_SLOWER = {"Q4_K": "bench/results/h200_quant_tiled.json (H200, 2026-12-06)",
                         "IQ4_XS": "bench/results/h200_quant_tiled.json (H200, 2026-12-06)"}


def tiled_from_rows(weights):
    """The rows per expert from which quantized `weights` run the tile-decode GEMM in the
    automatic choice: the largest of its parts' formats' measured rows, or None where a part's
    format has none (not measured: the automatic choice declines it)."""
    rows = [TILED_FROM_ROWS.get(w.qtype.name) for w in weights.parts().values()]
    return None if any(r is None for r in rows) else max(rows)


# The mixed-input Hopper GEMM (cuda_quantized_mixed): (gate/up, down) -> rows per expert from
# which the layer's automatic choice runs it, each GEMM named by the format it runs on the
# mixed-input GEMM or MIXED_DECODED where that path decodes it to bf16 for the dense padded GEMM.
# Keyed per GEMM because what decides the crossover is which GEMMs skip the decode pass (a
# decoded GEMM pays it as the dequant path does, whatever its format: the pass writes bf16) and
# the format the mixed GEMM reads; a format added to the mixed GEMM, or the split not measured
# yet (gate/up decoded, down mixed), is one more row. No row: the automatic choice declines it.
# bench/results/h100_quant_mixed.json (H100 80GB HBM3, 2026-12-06; us, E128: E=128 K=8 H=2048
# I=768, E512: E=512 K=10 H=2048 I=512; rows per expert T * K / E):
# - all Q4_K: E512 T=1024 (20 rows) gpuq 1068, mixed 1147 (gpuq 0.93x); E128 T=512 (32) gpuq
#   574, mixed 431 (mixed 0.75x); from there mixed leads gpuq (E512 T=2048, 40: 1200 vs 1889)
#   and the dequant path at every point up to T=16384 (E128: 3682 vs 3713, E512: 3758 vs 5389)
# - gate/up Q4_K, down Q6_K decoded: E512 T=2048 (40) gpuq 2047, mixed 2049 (level); E128
#   T=1024 (64) gpuq 1023, mixed 774 (0.76x); from there mixed leads gpuq (E512 T=4096, 80:
#   2154 vs 3253) and the dequant path at every point but one, level: E128 T=16384 (3762 vs
#   3664, 1.03x)
# bench/results/h100_quant_mixed_formats.json (the same card and configs, 2026-12-06; the other
# formats of 32-value groups, both GEMMs in one format unless named): the mixed path leads the
# dequant path at every point from T = 1024 (level at E128 T=16384) and crosses gpuq's GEMMs at
# - IQ4_XS, Q4_0, IQ4_NL, Q5_K: between 20 rows (E512 T=1024: gpuq 0.89x / 0.90x / 0.98x /
#   0.97x the mixed path's time) and 32 (E128 T=512: mixed 0.79x / 0.70x / 0.69x / 0.77x)
# - Q5_0: between 10 (E512 T=512: gpuq 0.88x) and 20 (E512 T=1024: mixed 0.88x)
# - Q8_0: at or below 10 (E512 T=512: mixed 0.90x gpuq's time; nothing smaller measured)
# - gate/up Q5_K, down Q6_K decoded (a Q5_K_M file's layer): between 32 (E128 T=512: gpuq 0.85x)
#   and 40 (E512 T=2048: mixed 0.97x)
MIXED_DECODED = "decoded"
MIXED_FROM_ROWS = {
    ("Q4_K", "Q4_K"): 24,           # between 20 (gpuq faster) and 32 (mixed faster)
    ("Q4_K", MIXED_DECODED): 48,    # between 40 (level) and 64 (mixed faster)
    ("IQ4_XS", "IQ4_XS"): 24,
    ("Q4_0", "Q4_0"): 24,
    ("IQ4_NL", "IQ4_NL"): 24,
    ("Q5_K", "Q5_K"): 24,
    ("Q5_0", "Q5_0"): 16,
    ("Q8_0", "Q8_0"): 10,           # the smallest count measured
    ("Q5_K", MIXED_DECODED): 40,
}


# Whether the mixed-input GEMM as built now has passed its GPU tests
# (tests/test_cuda_quantized_mixed.py on an sm_90 GPU). The rows above were measured on the
# kernel that read the codes row-major; its codes were then reordered (csrc/hopper/
# hopper_mixed_convert.cuh CodesAtom, 2026-12-06) and that build compiled and checked on the
# host only (no GPU could be started): until its GPU tests pass, the automatic choice passes it
# by (gpuq's GEMMs and the dequant path keep their calls) and path="cuda_quantized_mixed" runs
# it. Set True with the run that passes them (bench/quant_mixed_notes.md).
MIXED_KERNEL_PASSED_GPU_TESTS = False


# The mixed-input GEMM's token tile (the plan's tile_m): 64 up to this many mean rows per expert
# where both GEMMs run mixed, else 128. By arithmetic, not measured: per K tile a 128 x 64 block
# of codes is converted (~300 issue cycles of the consumer warps, 4-bit codes, SASS count) and
# multiplied by the tile's tokens (wgmma: ~512 cycles at 128 tokens, ~256 at 64); an expert of at
# most 64 rows fills one tile either way, and the 64-token tile spends half the tensor work on
# padding rows. Above 64 rows two 64-token tiles convert each weight twice. A GEMM decoded onto
# the padded dense GEMM keeps 128 (that GEMM's M tile).
MIXED_TOKEN_TILE_64_UP_TO_ROWS = 64

# Whether the 64-token tile has been timed against the 128 one on a GPU (bench_quant.py
# --mixed-tile-64-up-to 0 holds 128: h200_mixed.sh's MIXED_TILE128_T). MIXED_FROM_ROWS was
# measured with the 128-token tile; until the 64 one is timed the automatic choice keeps 128 and
# the rule above applies to tile_m=None only where this is True (tile_m=64 runs it by name).
MIXED_TOKEN_TILE_64_MEASURED = False


def mixed_from_rows(gate_up, down):
    """The rows per expert from which the automatic choice runs cuda_quantized_mixed on a layer
    whose gate/up and down GEMMs run as `gate_up` and `down` (the format the mixed-input GEMM
    reads, "A+B" for gate and up in two, or MIXED_DECODED), or None where that split has no
    row. A layer whose GEMMs all run on the mixed GEMM in several formats takes the largest of
    those formats' one-format rows (derived, not measured: the mixed path's time hardly
    depends on the format, h100_quant_mixed_formats.json, so the crossover is where gpuq's
    GEMMs on the slowest-crossing format fall behind); a decoded GEMM needs its split's row.

    Measured on an H100, applied on every device the kernel runs on (compute capability 9.0:
    the H200 too, not measured there): the H200 has the H100's SMs with faster memory, and one
    table for sm_90 keeps the choice the same on both until an H200 run says otherwise."""
    found = MIXED_FROM_ROWS.get((gate_up, down))
    if found is not None or MIXED_DECODED in (gate_up, down):
        return found
    rows = [MIXED_FROM_ROWS.get((f, f)) for f in {*gate_up.split("+"), *down.split("+")}]
    return None if None in rows else max(rows)


def below_rows(call, start, runs_from) -> str:
    """The automatic choice's reason to pass by a path that runs from `start` rows per expert
    (`runs_from`: the rest of the sentence), or "" where the call has that many; an unknown
    count declines."""
    rows = call.rows_per_expert()
    if rows is not None and rows >= start:
        return ""
    known = "an unknown count of" if rows is None else f"{rows:.3g}"
    return f"{known} rows per expert: {runs_from}"
