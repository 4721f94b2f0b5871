"""Optimizers under floating-point quantization, as optax transforms."""

from jaxlab.optim.moment_storage import MOMENT_STORAGES
from jaxlab.optim.quantized_adam import (
    IMPLEMENTATIONS,
    ScaleByQuantizedAdamState,
    quantized_adam,
    scale_by_quantized_adam,
)
from jaxlab.optim.quantized_muon import (
    ScaleByQuantizedMuonState,
    quantized_muon,
    scale_by_quantized_muon,
)
from jaxlab.optim.transforms import quantize_params, quantize_updates, quantize_weights

__all__ = [
    "IMPLEMENTATIONS",
    "MOMENT_STORAGES",
    "ScaleByQuantizedAdamState",
    "ScaleByQuantizedMuonState",
    "quantize_params",
    "quantize_updates",
    "quantize_weights",
    "quantized_adam",
    "quantized_muon",
    "scale_by_quantized_adam",
    "scale_by_quantized_muon",
]
