r"""Gradient descent from every point of a grid of starts, as a Pallas kernel.

The hot loop of :func:`jaxlab.dynamics.factorization.convergence_map`: for each
start ``(u_0, v_0)`` (a column of two ``(d, N)`` arrays) iterate GD on

.. math::
  L(u, v) = (u^\top v - y)^2 + \lambda (\|u\|^2 + \|v\|^2), \qquad
  r = u^\top v - y, \qquad
  u \leftarrow u - 2\eta (r v + \lambda u), \quad
  v \leftarrow v - 2\eta (r u + \lambda v)

until ``\|\nabla L\| < tol`` (converged), ``\|(u, v)\|^2 \ge bound`` or a
non-finite value (diverged), or ``max_steps`` steps. Every start is
independent and elementwise across the grid, so a block of ``block`` starts is
one program that loops until all its starts have stopped: blocks of fast
starts exit early, only blocks near the fractal boundary run long.

Outputs per start: the stopping point ``(u, v)``, the number of GD steps taken
when it stopped and a status (0 running at ``max_steps``, 1 converged,
2 diverged). :func:`gd_grid_reference` computes the same with ``jnp`` over
chunks of starts (a ``while_loop`` per chunk, under ``lax.map``).

Layout: the factor dimension ``d`` is padded with zeros to a power of two
(zero coordinates stay zero under GD: their gradient is ``2 r 0 + 2 lambda 0``)
and starts are padded to a multiple of ``block``; padded starts sit at the
origin (a stationary point: they stop at once) and are dropped. Scalars travel as one small
array so a new step size does not recompile.

Platforms (picked by the platform lowered for, ``lax.platform_dependent``): Triton
on GPU, float32 and float64; Mosaic on TPU, float32 only (scalars in SMEM, blocks
of at least 128 starts), a float64 grid runs :func:`gd_grid_reference` there.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

from kernels_pallas import _checks

RUNNING, CONVERGED, DIVERGED = 0, 1, 2


class GDCarry(NamedTuple):
  """Loop state of one chunk (reference) or one block (kernel) of starts."""
  u: jax.Array       # (d, B)
  v: jax.Array       # (d, B)
  steps: jax.Array   # (B,) int32, GD steps taken when the start stopped
  status: jax.Array  # (B,) int32, RUNNING / CONVERGED / DIVERGED
  t: jax.Array       # int32 scalar, steps taken so far


def _gd_body(c: GDCarry, y, lam, eta, tol2, bound, max_steps) -> GDCarry:
  """Checks every running start, then takes one GD step on those still running.

  The check at ``t == max_steps`` only classifies the point reached after
  ``max_steps`` steps: no start moves then, so none takes more than ``max_steps``.
  """
  r = jnp.sum(c.u * c.v, axis=0) - y
  gu = 2.0 * (r * c.v + lam * c.u)
  gv = 2.0 * (r * c.u + lam * c.v)
  g2 = jnp.sum(gu * gu + gv * gv, axis=0)
  n2 = jnp.sum(c.u * c.u + c.v * c.v, axis=0)
  running = c.status == RUNNING
  diverged = ~(n2 < bound) | ~(g2 < jnp.inf)  # also catches NaN
  # int32 constants: under jax.enable_x64 a Python int would be an int64 scalar,
  # which Mosaic (TPU) does not lower.
  status = jnp.where(running & diverged, jnp.int32(DIVERGED),
                     jnp.where(running & (g2 < tol2), jnp.int32(CONVERGED), c.status))
  still = (status == RUNNING) & (c.t < max_steps)
  u = jnp.where(still[None], c.u - eta * gu, c.u)
  v = jnp.where(still[None], c.v - eta * gv, c.v)
  steps = jnp.where(running, c.t, c.steps)
  return GDCarry(u, v, steps, status, c.t + 1)


def _run(u, v, y, lam, eta, tol2, bound, max_steps) -> GDCarry:
  n = u.shape[1]
  init = GDCarry(u, v, jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32), jnp.int32(0))

  def cond(c):
    # max_steps + 1 checks: the last one only classifies the point after max_steps steps.
    # (A max over int32, not jnp.any: Triton lowers neither reduce_or nor a bool max;
    # not a sum: under jax.enable_x64 jnp.sum widens to int64, which Mosaic does not lower.)
    return (c.t <= max_steps) & (jnp.max((c.status == RUNNING).astype(jnp.int32)) > 0)

  out = jax.lax.while_loop(cond, lambda c: _gd_body(c, y, lam, eta, tol2, bound, max_steps),
                             init)
  return out._replace(steps=jnp.where(out.status == RUNNING, jnp.int32(max_steps), out.steps))


def _check(u, v):
  if u.ndim != 2 or u.shape != v.shape:
    raise ValueError(f"u and v must both have shape (d, N), got {u.shape} and {v.shape}")


@functools.partial(jax.jit, static_argnames=("max_steps", "chunk"))
def gd_grid_reference(u, v, y, lam, eta, tol, bound, *, max_steps: int, chunk: int = 4096):
  """Plain-jnp reference: ``(u, v, steps, status)`` after GD from every column.

  Args:
    u, v: ``(d, N)`` starts, one per column (float32 or float64).
    y, lam, eta: target, ridge coefficient and step size (traced scalars).
    tol: a start has converged when ``||grad L|| < tol``.
    bound: a start has diverged when ``||u||^2 + ||v||^2 >= bound`` (or on NaN/inf).
    max_steps: static cap on GD steps.
    chunk: starts per ``while_loop`` (each chunk stops when all its starts stop).

  Returns:
    ``(u, v, steps, status)`` with shapes ``(d, N), (d, N), (N,), (N,)``.
  """
  _check(u, v)
  d, n = u.shape
  dt = u.dtype
  chunk = min(chunk, n)
  m = -(-n // chunk)
  pad = lambda x: jnp.pad(x, ((0, 0), (0, m * chunk - n))).reshape(d, m, chunk).swapaxes(0, 1)
  s = [jnp.asarray(a, dt) for a in (y, lam, eta, jnp.square(tol), bound)]
  out = jax.lax.map(lambda uv: _run(uv[0], uv[1], *s, max_steps), (pad(u), pad(v)))
  unpad = lambda x: x.swapaxes(0, 1).reshape(d, m * chunk)[:, :n]
  return (unpad(out.u), unpad(out.v), out.steps.reshape(-1)[:n], out.status.reshape(-1)[:n])


def _kernel(s_ref, u_ref, v_ref, uo_ref, vo_ref, steps_ref, status_ref, *, max_steps):
  y, lam, eta, tol2, bound = (s_ref[i] for i in range(5))
  out = _run(u_ref[...], v_ref[...], y, lam, eta, tol2, bound, max_steps)
  uo_ref[...] = out.u
  vo_ref[...] = out.v
  steps_ref[...] = out.steps
  status_ref[...] = out.status


TPU_MIN_BLOCK = 128  # one lane row: Mosaic tiles a (d_pad, block) block's last dimension by 128


def _call(scal, u, v, *, tpu: bool, max_steps: int, block: int, interpret: Any):
  """One ``pallas_call`` on padded ``(d_pad, N_pad)`` starts; ``N_pad % block == 0``."""
  dp, npad = u.shape
  tile = pl.BlockSpec((dp, block), lambda i: (0, i))
  row = pl.BlockSpec((block,), lambda i: (i,))
  if tpu:
    # Scalars in SMEM; start blocks are independent ("parallel": split over cores).
    scalar = pl.BlockSpec(memory_space=pltpu.SMEM)
    compiler_params = pltpu.CompilerParams(dimension_semantics=("parallel",))
  else:
    scalar = pl.BlockSpec((8,), lambda i: (0,))
    compiler_params = None if interpret else plt.CompilerParams(num_warps=4)
  return pl.pallas_call(
      functools.partial(_kernel, max_steps=max_steps),
      grid=(npad // block,),
      in_specs=[scalar, tile, tile],
      out_specs=[tile, tile, row, row],
      out_shape=[jax.ShapeDtypeStruct((dp, npad), u.dtype),
                 jax.ShapeDtypeStruct((dp, npad), u.dtype),
                 jax.ShapeDtypeStruct((npad,), jnp.int32),
                 jax.ShapeDtypeStruct((npad,), jnp.int32)],
      interpret=interpret,
      compiler_params=compiler_params,
      name="fractal_gd_grid",
  )(scal, u, v)


def _padded_call(u, v, y, lam, eta, tol, bound, *, tpu: bool, max_steps: int, block: int,
                 interpret: Any):
  """Pads ``d`` to a power of two and the starts to ``block``, runs one variant, unpads."""
  if tpu:
    block = max(block, TPU_MIN_BLOCK)
  d, n = u.shape
  dt = u.dtype
  dp = 1 << max(d - 1, 0).bit_length()
  npad = -(-n // block) * block
  pad = lambda x: jnp.pad(x, ((0, dp - d), (0, npad - n)))
  scal = jnp.stack([jnp.asarray(a, dt) for a in (y, lam, eta, jnp.square(tol), bound)]
                   + [jnp.zeros((), dt)] * 3)
  uo, vo, steps, status = _call(scal, pad(u), pad(v), tpu=tpu, max_steps=max_steps,
                                block=block, interpret=interpret)
  return uo[:d, :n], vo[:d, :n], steps[:n], status[:n]


@functools.partial(jax.jit, static_argnames=("max_steps", "block", "interpret"))
def _gd_grid_pallas(u, v, y, lam, eta, tol, bound, *, max_steps, block, interpret):
  args = (u, v, y, lam, eta, tol, bound)
  kw = dict(max_steps=max_steps, block=block, interpret=interpret)
  if isinstance(interpret, pltpu.InterpretParams):
    return _padded_call(*args, tpu=True, **kw)
  if interpret:
    return _padded_call(*args, tpu=False, **kw)
  gpu = functools.partial(_padded_call, tpu=False, **kw)
  if u.dtype == jnp.float64:
    # Mosaic (TPU) has no float64: the TPU branch is the jnp reference.
    tpu = functools.partial(gd_grid_reference, max_steps=max_steps)
  else:
    tpu = functools.partial(_padded_call, tpu=True, **kw)
  # The platform lowered for picks the branch (an export for TPU from a CPU host too);
  # on CPU the default branch's pallas_call says that only interpret mode runs there.
  return lax.platform_dependent(*args, tpu=tpu, default=gpu)


def _check_kernel_args(u, v, block, interpret):
  _check(u, v)
  if not jnp.issubdtype(u.dtype, jnp.floating) or u.dtype != v.dtype:
    raise TypeError(f"u and v must share a float dtype, got {u.dtype} and {v.dtype}")
  if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
    raise TypeError(f"block must be an int, got {block!r}")
  if block <= 0 or block & (block - 1):
    raise ValueError(f"block must be a power of two, got {block}")
  _checks.check_interpret(interpret)


def gd_grid_pallas(u, v, y, lam, eta, tol, bound, *, max_steps: int, block: int = 256,
                   interpret: bool | pltpu.InterpretParams = False):
  """The Pallas kernel: same outputs as :func:`gd_grid_reference`.

  Grid: one program per ``block`` starts, each a ``while_loop`` over GD steps on
  a ``(d_pad, block)`` tile held in registers (GPU) or VMEM (TPU).

  Args:
    u, v, y, lam, eta, tol, bound, max_steps: as in :func:`gd_grid_reference`.
    block: starts per program, a power of two (static). On TPU at least
      ``TPU_MIN_BLOCK`` (128, one lane row) is used; the results do not depend
      on it (every start runs alone).
    interpret: False compiles for the platform the call is lowered for: Triton
      on GPU (float32 and float64), Mosaic on TPU (float32; float64 runs the
      jnp reference there, Mosaic has no float64). True runs the GPU layout in
      Pallas' generic interpreter, a ``pltpu.InterpretParams`` the TPU layout
      (scalars in SMEM) in the TPU interpreter.

  Returns:
    ``(u, v, steps, status)`` as :func:`gd_grid_reference`.
  """
  _check_kernel_args(u, v, block, interpret)
  return _gd_grid_pallas(u, v, y, lam, eta, tol, bound, max_steps=max_steps, block=int(block),
                         interpret=interpret)


def gd_grid(u, v, y, lam, eta, tol, bound, *, max_steps: int, use_kernel: bool | None = None):
  """Dispatcher: the Pallas kernel on GPU/TPU, the jnp reference elsewhere.

  ``use_kernel=None`` decides by the platform the computation is lowered for
  (``lax.platform_dependent``), not by ``jax.default_backend()``, so an export
  for CUDA or TPU from a CPU host gets the kernel (float64 on TPU: the
  reference, see :func:`gd_grid_pallas`). True / False force one path.
  """
  args = (u, v, y, lam, eta, tol, bound)
  if use_kernel is None:
    _check(u, v)
    kernel = lambda *a: gd_grid_pallas(*a, max_steps=max_steps)
    reference = lambda *a: gd_grid_reference(*a, max_steps=max_steps)
    return lax.platform_dependent(*args, cuda=kernel, rocm=kernel, tpu=kernel, default=reference)
  if not isinstance(use_kernel, bool):
    raise TypeError(f"use_kernel must be a bool or None, got {use_kernel!r}")
  fn = gd_grid_pallas if use_kernel else gd_grid_reference
  return fn(*args, max_steps=max_steps)
