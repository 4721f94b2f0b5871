"""Simulated floating-point formats: :class:`FloatFormat` and :func:`quantize`."""

from jaxlab.quant.float_format import (
    ROUNDING_MODES,
    FloatFormat,
    quantize,
    quantize_bits,
    quantize_f32,
    quantize_tree,
)

__all__ = [
    "ROUNDING_MODES",
    "FloatFormat",
    "quantize",
    "quantize_bits",
    "quantize_f32",
    "quantize_tree",
]
