"""The matching experiment end to end at its smallest setting, and the instances.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it (and that a
rerun resumes from it) with :func:`check_smoke_results`; the rest of this module tests the
report functions.
"""

import json
import pathlib
from unittest import mock

import numpy as np

from experiments import bench_matching, matching_incremental
from experiments.reporting import Ratio, check_claims
from jaxlab.data import matching_instances as instances


def _check_claims(rows):
  assert len(rows) == 4
  check_claims(rows)


SMOKE_ARGS = ["--smoke", "--algorithms", "push_relabel", "exact", "greedy"]  # the notebook's


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.matching_incremental`` with ``SMOKE_ARGS`` must have
  written under ``out``; then a rerun with the same ``--out`` must resume from it.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[matching_incremental]`` runs that
  notebook's tiny cell, with these arguments, and then calls this on its output). The
  rerun here computes nothing: every instance is read back from ``out/runs``.
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  assert {r["family"] for r in saved["runs"]} == set(instances.FAMILIES)
  assert (out / "cost_ratio.png").stat().st_size > 0
  assert "| family | n | algorithm |" in (out / "summary.md").read_text()
  for run in saved["runs"]:
    algs = run["algorithms"]
    np.testing.assert_allclose(algs["exact"]["ratio"], 1.0, rtol=1e-4)  # exact = OPT
    assert min(algs["greedy"]["ratio"]) >= 1.0 - 1e-4
    assert algs["push_relabel"]["ratio"][-1] < algs["greedy"]["ratio"][-1] + 1e-6
  # A rerun with the same --out resumes: every instance is read back, none recomputed.
  assert len(list((out / "runs").glob("*.json"))) == len(instances.FAMILIES)
  with mock.patch.object(matching_incremental, "run_instance",
                         side_effect=AssertionError("an instance was recomputed")) as run:
    again = matching_incremental.main(SMOKE_ARGS + ["--out", str(out)])
  run.assert_not_called()
  assert [r["algorithms"]["exact"]["costs"] for r in again["runs"]] == [
      r["algorithms"]["exact"]["costs"] for r in saved["runs"]]
  rows = matching_incremental.claims(saved)  # report rows at the smoke scale
  _check_claims(rows)
  assert rows[2].held is None  # push_relabel+tail was not run


def _synthetic(pr_final=1.05, greedy_final=1.5, tail_final=1.3, pr_time=1.0):
  """Two families x two seeds with hand-set final cost / OPT and times; the defaults make
  every claim hold. The arguments set the last instance-seed only."""
  runs = []
  for family in ("uniform", "clustered"):
    for seed in range(2):
      last = family == "clustered" and seed == 1
      algs = {"push_relabel": {"ratio": [1.2, pr_final if last else 1.05],
                               "time_s": pr_time if last else 1.0},
              "greedy": {"ratio": [1.4, greedy_final if last else 1.5], "time_s": 0.1},
              "push_relabel+tail": {"ratio": [1.2, tail_final if last else 1.3], "time_s": 1.0},
              "exact": {"ratio": [1.0, 1.0], "time_s": 2.0}}
      runs.append({"family": family, "n": 100, "seed": seed, "algorithms": algs})
  return {"config": {"seeds": 2}, "runs": runs}


def test_claims_on_synthetic_results():
  """Each criterion on hand-set numbers: all hold, then each fails on its own."""
  rows = matching_incremental.claims(_synthetic())
  _check_claims(rows)
  assert [r.held for r in rows] == [True, True, True, True]
  assert "worst 1.050" in rows[0].measured and "lower in 4/4" in rows[1].measured
  for change, row in ((dict(pr_final=1.15), 0), (dict(greedy_final=1.04), 1),
                      (dict(tail_final=1.0), 2), (dict(pr_time=3.0), 3)):
    held = [r.held for r in matching_incremental.claims(_synthetic(**change))]
    assert held == [i != row for i in range(4)], change


def test_ratios_on_a_synthetic_bench():
  base = {"exact_s": 2.0, "scipy_one_solve_s": 4.0, "push_relabel_s": 1.0,
          "push_relabel_ratio": 1.05, "exact_ratio": 1.0, "greedy_ratio": 1.5}
  rows = bench_matching.ratios({"rows": [dict(base, n=1000, numpy_exact_s=8.0),
                                         dict(base, n=10000, numpy_exact_s=None)]})
  assert all(isinstance(r, Ratio) and r.name for r in rows)
  assert {r.name: r.ratio for r in rows} == {
      "exact vs the same step in numpy, n = 1000": 0.25,  # numpy anchor only where it ran
      "exact (all n insertions) vs one scipy solve, n = 1000": 0.5,
      "push_relabel vs exact, n = 1000": 0.5,
      "exact (all n insertions) vs one scipy solve, n = 10000": 0.5,
      "push_relabel vs exact, n = 10000": 0.5}
