"""Every Pallas kernel lowers for CUDA (Triton), checked from a CPU-only machine.

``jax.export`` with ``platforms=("cuda",)`` runs the Pallas-to-Triton lowering
without a GPU; compiling the Triton IR (ptxas) still needs one.
"""

import jax
import jax.numpy as jnp
from jax import export

from jaxlab.quant import FloatFormat
from kernels_pallas.fractal_gd import gd_grid_pallas
from kernels_pallas.matching import round_proposals_pallas
from kernels_pallas.quantized_adam import QuantFormats, quantized_adam_step_pallas

TRITON = [export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")]


def _lowers_for_cuda(fn, *args) -> str:
  exported = export.export(jax.jit(fn), platforms=("cuda",), disabled_checks=TRITON)(*args)
  return exported.mlir_module()


def test_matching_round_kernel_lowers_to_triton():
  g, n = 16, 1024
  args = (jnp.zeros((g, n)), jnp.zeros(g, jnp.int32), jnp.zeros(n, jnp.int32),
          jnp.ones(n, bool), jnp.ones(g, bool), jnp.arange(g, dtype=jnp.int32), jnp.int32(0),
          jnp.float32(1.0), (jnp.uint32(1), jnp.uint32(2)))
  text = _lowers_for_cuda(lambda *a: round_proposals_pallas(*a, (2.9, 3.0)), *args)
  assert "xla.gpu.triton" in text


def test_quantized_adam_kernel_lowers_to_triton():
  p = jnp.zeros(4096)
  fn = lambda p, g, m, v: quantized_adam_step_pallas(
      p, g, m, v, step=1, lr=1e-3, formats=QuantFormats(weights=FloatFormat.BF16),
      rounding="stochastic", key=jax.random.key(0))
  assert "xla.gpu.triton" in _lowers_for_cuda(fn, p, p, p, p)


def test_fractal_gd_kernel_lowers_to_triton():
  u = jnp.zeros((5, 1000))
  fn = lambda u, v: gd_grid_pallas(u, v, 1.0, 0.3, 0.6, 1e-5, 1e8, max_steps=100)
  assert "xla.gpu.triton" in _lowers_for_cuda(fn, u, u)
