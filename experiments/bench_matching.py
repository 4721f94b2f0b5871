"""Timing of incremental matching against its anchors, in one run.

    python -m experiments.bench_matching [--quick] [--n N ...] [--out DIR]

Uniform 2-D instance, all n insertions: ``exact`` (jitted, one scan) against
the same step in plain numpy (``jaxlab.matching.incremental_exact_numpy``) and
against one ``scipy.optimize.linear_sum_assignment`` solve of the final
problem; ``push_relabel`` (sequential) and ``greedy`` for scale. Prints
seconds and ratios; compilation is excluded (a throwaway run compiles first).
Targets (issue 3): exact at least as fast as the numpy step, and at
n = 10,000 faster than one scipy solve.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np

from experiments.common import ExperimentCLI, Ratio, save_json
from jaxlab import matching as M
from jaxlab.data.matching_instances import uniform


def _time_jax(algorithm: str, servers, requests, **kw) -> tuple[float, float]:
  warm = M.init(servers, algorithm=algorithm, **kw)
  jax.block_until_ready(M.insert_many(warm, requests).count)  # compile
  state = M.init(servers, algorithm=algorithm, **kw)
  start = time.perf_counter()
  state = M.insert_many(state, requests)
  jax.block_until_ready(state.count)
  return time.perf_counter() - start, float(M.cost(state))


def bench(n: int, seed: int, numpy_anchor: bool) -> dict:
  servers, requests, _ = uniform(n, seed)
  row = {"n": n, "seed": seed}
  start = time.perf_counter()
  opt = M.optimal_cost(requests, servers)
  row["scipy_one_solve_s"] = time.perf_counter() - start
  for alg in ("exact", "push_relabel", "greedy"):
    t, c = _time_jax(alg, servers, requests)
    row[f"{alg}_s"], row[f"{alg}_ratio"] = t, c / opt
  if numpy_anchor:
    start = time.perf_counter()
    M.incremental_exact_numpy(requests, servers)
    row["numpy_exact_s"] = time.perf_counter() - start
  return row


def ratios(result: dict) -> list[Ratio]:
  """Time ratios of ``exact`` (all n insertions) to its anchors, per n, same run.

  ``exact`` vs the same step in plain numpy (run for n <= 2,000 only) and vs one
  scipy solve of the final problem; ``push_relabel`` vs ``exact``, with both
  costs / OPT in the note.
  """
  out = []
  for r in result["rows"]:
    n = r["n"]
    if r.get("numpy_exact_s"):
      out.append(Ratio(f"exact vs the same step in numpy, n = {n}",
                       r["exact_s"] / r["numpy_exact_s"], "all n insertions; target: <= 1"))
    out.append(Ratio(f"exact (all n insertions) vs one scipy solve, n = {n}",
                     r["exact_s"] / r["scipy_one_solve_s"],
                     "target: < 1 at n = 10,000" if n >= 10000 else ""))
    out.append(Ratio(f"push_relabel vs exact, n = {n}", r["push_relabel_s"] / r["exact_s"],
                     f"cost / OPT {r['push_relabel_ratio']:.3f} vs {r['exact_ratio']:.3f}; "
                     f"greedy {r['greedy_ratio']:.3f}"))
  return out


CONFIGS = {"full": dict(n=[1000, 2000, 10000]), "quick": dict(n=[1000])}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_matching",
                       helps={"n": "instance sizes"})


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  sizes = cfg["n"]
  rows = [bench(n, 0, numpy_anchor=n <= 2000) for n in sizes]
  print(f"backend={jax.default_backend()}")
  print(f"{'n':>6s} {'exact s':>8s} {'numpy s':>8s} {'np/ours':>8s} {'scipy 1x':>9s} "
        f"{'ours/scipy':>10s} {'PR s':>7s} {'PR/OPT':>7s} {'greedy/OPT':>10s}")
  for r in rows:
    np_s = r.get("numpy_exact_s", float("nan"))
    print(f"{r['n']:6d} {r['exact_s']:8.2f} {np_s:8.2f} {np_s / r['exact_s']:8.2f} "
          f"{r['scipy_one_solve_s']:9.2f} {r['exact_s'] / r['scipy_one_solve_s']:10.2f} "
          f"{r['push_relabel_s']:7.2f} {r['push_relabel_ratio']:7.3f} {r['greedy_ratio']:10.3f}")
  os.makedirs(args.out, exist_ok=True)
  result = {"backend": jax.default_backend(), "jax": jax.__version__, "rows": rows}
  result = save_json(os.path.join(args.out, "results.json"), result, "bench_matching", argv,
                     default=lambda x: None if np.isnan(x) else x)
  return result


if __name__ == "__main__":
  main()
