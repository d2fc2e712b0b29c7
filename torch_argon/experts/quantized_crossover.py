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
