"""Timing of the convergence-map hot loop: kernel and chunked reference vs plain vmapped GD.

    python -m experiments.bench_fractal_gd [--resolution R ...] [--max-steps T] [--out DIR]

The anchor is what one writes first: ``jax.vmap`` over starts of a
``lax.fori_loop`` of ``max_steps`` GD steps, then classify. The chunked
``jnp`` reference (``gd_grid_reference``: a ``while_loop`` per chunk that stops
when its starts have all stopped) and, on GPU/TPU, the Pallas kernel
(``gd_grid_pallas``: one ``while_loop`` per block of starts) are timed against
it on the same grid (``lam = 0.3``, ``eta = 0.97 eta*``, float32), after one
compiling call each. Prints times and ratios; writes ``results.json`` and
``summary.md``.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.cli import ExperimentCLI
from experiments.records import machine, write_results
from experiments.reporting import Ratio
from jaxlab.core.checks import check_int
from jaxlab.dynamics import factorization as F
from kernels_pallas.fractal_gd import gd_grid_pallas, gd_grid_reference


@functools.partial(jax.jit, static_argnames=("max_steps",))
def plain_vmapped_gd(u, v, y, lam, eta, *, max_steps: int):
  """The anchor: every start takes all ``max_steps`` steps (diverged ones saturate)."""
  def one(u, v):
    def body(_, uv):
      u, v = F.gd_step(uv[0], uv[1], y, lam, eta)
      big = jnp.sum(u * u + v * v) >= 1e8
      return jnp.where(big, uv[0], u), jnp.where(big, uv[1], v)  # freeze, as the kernel does
    return jax.lax.fori_loop(0, max_steps, body, (u, v))
  return jax.vmap(one, in_axes=(1, 1), out_axes=1)(u, v)


def _time(fn, repeats: int = 3) -> float:
  jax.block_until_ready(fn())  # compile
  best = np.inf
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - start)
  return best


def ratios(result: dict) -> list[Ratio]:
  """Time of the chunked reference (and, on GPU/TPU, the Pallas kernel) over plain
  vmapped GD on the same grid, per resolution (< 1: faster than the anchor)."""
  out = []
  for r in result["rows"]:
    grid = f"{r['resolution']}^2 starts, up to {result['max_steps']} steps"
    out.append(Ratio(f"chunked jnp reference vs plain vmapped GD, {grid}",
                     r["reference_s"] / r["plain_vmap_s"],
                     f"speedup {r['reference_speedup']:.1f}x"))
    if r.get("kernel_s") is not None:
      out.append(Ratio(f"Pallas kernel vs plain vmapped GD, {grid}",
                       r["kernel_s"] / r["plain_vmap_s"], f"speedup {r['kernel_speedup']:.1f}x"))
  return out


CONFIGS = {"full": dict(resolution=[128, 256], max_steps=2000)}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_fractal_gd",
                       helps={"resolution": "map sides timed"})


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  args = argparse.Namespace(**{**vars(args), **cfg})
  check_int(args.max_steps, "max_steps", lo=1)  # -1 once timed nothing and wrote a result
  for res in args.resolution:
    check_int(res, "resolution", lo=1)
  lam, y = 0.3, 1.0
  eta = 0.97 * F.critical_step_size(y, lam)
  rows, start = [], time.time()
  gpu = jax.default_backend() in ("gpu", "tpu")
  for res in args.resolution:
    u0, v0 = F.slice_grid(F.random_slice(jax.random.key(0), 5), res, 2.5)
    u, v = u0.reshape(-1, 5).T, v0.reshape(-1, 5).T
    t_plain = _time(lambda u=u, v=v: plain_vmapped_gd(u, v, y, lam, eta,
                                                      max_steps=args.max_steps))
    t_ref = _time(lambda u=u, v=v: gd_grid_reference(u, v, y, lam, eta, 1e-5, 1e8,
                                                     max_steps=args.max_steps))
    t_ker = _time(lambda u=u, v=v: gd_grid_pallas(u, v, y, lam, eta, 1e-5, 1e8,
                                                  max_steps=args.max_steps)) if gpu else None
    rows.append({"resolution": res, "starts": res * res, "plain_vmap_s": t_plain,
                 "reference_s": t_ref, "kernel_s": t_ker,
                 "reference_speedup": t_plain / t_ref,
                 "kernel_speedup": None if t_ker is None else t_plain / t_ker})
  lines = ["| grid | plain vmapped GD | chunked jnp reference | Pallas kernel |",
           "|---|---|---|---|"]
  for r in rows:
    ker = ("not run (CPU)" if r["kernel_s"] is None
           else f"{r['kernel_s']:.3f} s ({r['kernel_speedup']:.1f}x)")
    lines.append(f"| {r['resolution']}^2 | {r['plain_vmap_s']:.3f} s | {r['reference_s']:.3f} s "
                 f"({r['reference_speedup']:.1f}x) | {ker} |")
  result = {"scale": "bench", "rows": rows, "max_steps": args.max_steps, "eta_frac": 0.97,
            "lam": lam, "wall_time_s": time.time() - start, "machine": machine()}
  write_results(args.out, "bench_fractal_gd", result, "\n".join(lines),
                f"lam = {lam}, eta = 0.97 eta*, float32, up to {args.max_steps} GD steps; "
                "best of 3 after compiling; speedups relative to plain vmapped GD.", argv=argv)
  return result


if __name__ == "__main__":
  main()
