"""GGUF quantized weight formats: the format table, input checks, the pure-torch dequant
reference (bit-exact with the `gguf` package) and random quantized weights for tests and
benches. Layouts and formulas: docs/quantized-formats.md."""
from .formats import FORMATS, QFormat, check_quantized, qformat, row_bytes
from .reference import dequantize_reference
from .synthetic import force_finite_scales, random_quantized
from .weights import (ACTIVATION_QUANT, QuantizedExperts, QuantizedWeight, build_experts,
                      concat_rows)

__all__ = ["FORMATS", "QFormat", "check_quantized", "qformat", "row_bytes",
           "dequantize_reference", "random_quantized", "force_finite_scales",
           "QuantizedWeight", "QuantizedExperts", "build_experts", "concat_rows",
           "ACTIVATION_QUANT"]
