"""Every Pallas kernel lowers for CUDA (Triton) and TPU (Mosaic), checked on a CPU-only host.

``jax.export`` with ``platforms=("cuda",)`` or ``("tpu",)`` runs the Pallas
lowering for that platform without the device, so these tests catch lowering
errors only: a block shape Mosaic rejects, an op Triton or Mosaic has no rule
for, a 64-bit value in a TPU kernel, the wrong backend's compiler params. They
do not compile the kernels: Mosaic's layout passes and compilation run on the
TPU chip, and ptxas needs a GPU. Kernels with 1-D blocks need a TPU chip
declared for lowering (Mosaic's 1-D block rules depend on its lane count), so
every export runs under an abstract mesh whose device is a TPU v5e.

They also check that the platform lowered for picks the path, not
``jax.default_backend()`` (which is "cpu" here): each dispatcher gets the
kernel for CUDA and TPU and the jnp reference for CPU. And, from the traced
``pallas_call``s, that no Triton kernel revisits an output block: on GPU every
grid point is a concurrent program, so a block written from two grid points
would race (the TPU matching and block-sparse attention kernels do revisit, on
their sequential "arbitrary" axis). Whether the compiled GPU kernels race is left to a device
run: interpret mode runs the grid in order and cannot show it.
"""

import itertools

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import export
from jax.experimental.pallas import triton as plt

from jaxlab.optim import quantized_adam
from jaxlab.quant import FloatFormat
from kernels_pallas.block_sparse_attention import (
  block_sparse_attention,
  block_sparse_attention_pallas,
)
from kernels_pallas.fractal_gd import gd_grid, gd_grid_pallas
from kernels_pallas.matching import round_proposals, round_proposals_pallas
from kernels_pallas.quantized_adam import (
  QuantFormats,
  quantized_adam_step,
  quantized_adam_step_pallas,
)

TRITON = [export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")]
TPU_CHIP = jax.sharding.AbstractMesh(
    (1,), ("x",), abstract_device=jax.sharding.AbstractDevice(
        device_kind="TPU v5 lite", num_cores=1, platform="tpu"))
MARK = {"cuda": "xla.gpu.triton", "tpu": "tpu_custom_call"}  # the kernel's custom call


def _lower(fn, platform, *args) -> str:
  """StableHLO text of ``fn`` exported for ``platform``."""
  with jax.sharding.use_abstract_mesh(TPU_CHIP):
    exported = export.export(jax.jit(fn), platforms=(platform,), disabled_checks=TRITON)(*args)
  return exported.mlir_module()


def _kernels_in(text):
  return {p for p, mark in MARK.items() if mark in text}


def _pallas_calls(jaxpr):
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "pallas_call":
      yield eqn
    for sub in jex.jaxprs_in_params(eqn.params):
      yield from _pallas_calls(sub)


def _triton_revisits(fn, *args):
  """(Triton kernels found, output blocks that two grid points of one of them write)."""
  found, revisits = 0, []
  for eqn in _pallas_calls(jax.make_jaxpr(fn)(*args).jaxpr):
    if not isinstance(eqn.params["compiler_params"], plt.CompilerParams):
      continue
    found += 1
    gm = eqn.params["grid_mapping"]
    writer = {}
    for point in itertools.product(*map(range, gm.grid)):
      for k, bm in enumerate(gm.block_mappings[gm.num_inputs:]):
        block = tuple(int(i) for i in jex.jaxpr_as_fun(bm.index_map_jaxpr)(*map(np.int32, point)))
        if (k, block) in writer:
          revisits.append((k, block, writer[(k, block)], point))
        writer[(k, block)] = point
  return found, revisits


# -- matching: the push-relabel round --------------------------------------------------------
def _round_args(g=16, n=300):  # 3 column tiles of 128, the last one padded
  return (jnp.zeros((g, n)), jnp.zeros(g, jnp.int32), jnp.zeros(n, jnp.int32),
          jnp.ones(n, bool), jnp.ones(g, bool), jnp.arange(g, dtype=jnp.int32), jnp.int32(0),
          jnp.float32(1.0), (jnp.uint32(1), jnp.uint32(2)))


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_matching_round_kernel_lowers(platform):
  fn = lambda *a: round_proposals_pallas(*a, (2.9, 3.0), block_cols=128)
  assert _kernels_in(_lower(fn, platform, *_round_args())) == {platform}


def test_matching_gpu_kernel_reduces_columns_in_one_program():
  # Before: grid (row blocks, column tiles) with every column tile read-modify-writing the
  # row block's outputs, i.e. concurrent programs racing on GPU.
  fn = lambda *a: round_proposals_pallas(*a, (2.9, 3.0), block_cols=128)
  assert _triton_revisits(fn, *_round_args()) == (1, [])


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
def test_matching_dispatcher_picks_by_lowering_platform(platform):
  text = _lower(lambda *a: round_proposals(*a, (2.9, 3.0)), platform, *_round_args())
  assert _kernels_in(text) == ({platform} - {"cpu"})


# -- quantized Adam ----------------------------------------------------------------------------
def _adam(rounding, fn=quantized_adam_step_pallas, **kw):
  fmts = QuantFormats(grads=FloatFormat.BF16, nu=FloatFormat.E4M3, weights=FloatFormat.BF16)
  key = jax.random.key(0) if rounding == "stochastic" else None
  return lambda p, g, m, v: fn(p, g, m, v, step=1, lr=1e-3, formats=fmts, rounding=rounding,
                               key=key, **kw)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic", "truncate"])
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_quantized_adam_kernel_lowers(platform, rounding):
  p = jnp.zeros(3000)  # padded to the block size
  assert _kernels_in(_lower(_adam(rounding), platform, p, p, p, p)) == {platform}


def test_quantized_adam_gpu_kernel_writes_each_block_once():
  p = jnp.zeros(3000)
  assert _triton_revisits(_adam("stochastic", block_size=1024), p, p, p, p) == (1, [])


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
def test_quantized_adam_dispatcher_picks_by_lowering_platform(platform):
  p = jnp.zeros(3000)
  text = _lower(_adam("nearest", fn=quantized_adam_step), platform, p, p, p, p)
  assert _kernels_in(text) == ({platform} - {"cpu"})


# -- fractal GD ----------------------------------------------------------------------------------
DTYPES = [("float32", False), ("float32", True), ("float64", True)]  # (dtype, jax.enable_x64)


def _gd(fn, **kw):
  return lambda u, v: fn(u, v, 1.0, 0.3, 0.6, 1e-5, 1e8, max_steps=10, **kw)


@pytest.mark.parametrize("dtype,x64", DTYPES)
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_fractal_gd_kernel_lowers(platform, dtype, x64):
  # block=32 also checks that the TPU layout widens it to one lane row (128).
  with jax.enable_x64(x64):
    u = jnp.zeros((5, 200), dtype)
    text = _lower(_gd(gd_grid_pallas, block=32), platform, u, u)
  # Mosaic has no float64: on TPU a float64 grid runs the jnp reference.
  want = set() if (platform, dtype) == ("tpu", "float64") else {platform}
  assert _kernels_in(text) == want


def test_fractal_gd_gpu_kernel_writes_each_block_once():
  u = jnp.zeros((5, 200))
  assert _triton_revisits(_gd(gd_grid_pallas, block=32), u, u) == (1, [])


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
def test_fractal_gd_dispatcher_picks_by_lowering_platform(platform):
  u = jnp.zeros((5, 200))
  assert _kernels_in(_lower(_gd(gd_grid), platform, u, u)) == ({platform} - {"cpu"})


def test_compiled_kernel_on_cpu_says_interpret_only():
  with pytest.raises(ValueError, match="interpret mode"):
    _lower(_gd(gd_grid_pallas), "cpu", jnp.zeros((2, 8)), jnp.zeros((2, 8)))


# -- block-sparse attention ---------------------------------------------------------------------
def _attention_args(dtype):
  # D = 40 is padded to 64 on GPU (Triton sizes) and is the full dimension on TPU; 4 query
  # blocks x 3 key blocks; the mask is shared over the batch.
  q, kv = jnp.zeros((2, 3, 64, 40), dtype), jnp.zeros((2, 3, 48, 40), dtype)
  return q, kv, kv, jnp.ones((1, 3, 4, 3), bool)


def _attention(fn, **kw):
  return lambda q, k, v, m: fn(q, k, v, m, block_q=16, block_k=16, causal=True, **kw)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_block_sparse_attention_kernel_lowers(platform, dtype):
  text = _lower(_attention(block_sparse_attention_pallas), platform, *_attention_args(dtype))
  assert _kernels_in(text) == {platform}


def test_block_sparse_attention_gpu_kernel_writes_each_block_once():
  args = _attention_args("float32")
  assert _triton_revisits(_attention(block_sparse_attention_pallas), *args) == (1, [])


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
def test_block_sparse_attention_dispatcher_picks_by_lowering_platform(platform):
  text = _lower(_attention(block_sparse_attention), platform, *_attention_args("bfloat16"))
  assert _kernels_in(text) == ({platform} - {"cpu"})


# -- quantized Adam through the optax API --------------------------------------------------------
def _optax_adam(implementation):
  """A jitted quantized_adam update (stochastic, every format, a schedule) and its arguments."""
  opt = quantized_adam(optax.linear_schedule(1e-3, 1e-4, 10), weight_decay=1e-2,
                       grads=FloatFormat.E5M2, mu=FloatFormat.E4M3, nu=FloatFormat.BF16,
                       weights=FloatFormat.BF16, rounding="stochastic",
                       implementation=implementation)
  params = {"w": jnp.zeros((40, 30)), "b": jnp.zeros(30)}  # 1230 elements: two 1024-blocks
  return opt.update, (params, opt.init(params), params)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_quantized_adam_optax_update_lowers(platform):
  fn, args = _optax_adam("pallas")
  assert _kernels_in(_lower(fn, platform, *args)) == {platform}


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
def test_quantized_adam_optax_auto_picks_by_lowering_platform(platform):
  fn, args = _optax_adam("auto")
  assert _kernels_in(_lower(fn, platform, *args)) == ({platform} - {"cpu"})
