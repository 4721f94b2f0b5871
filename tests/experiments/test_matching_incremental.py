"""The matching experiment end to end at its smallest setting, and the instances."""

import json

import numpy as np

from experiments import bench_matching, matching_incremental
from experiments.common import Ratio, check_claims
from jaxlab.matching import instances


def _check_claims(rows):
  assert len(rows) == 4
  check_claims(rows)


def test_smoke_run(tmp_path, capsys, monkeypatch):
  res = matching_incremental.main(["--smoke", "--out", str(tmp_path), "--algorithms",
                                   "push_relabel", "exact", "greedy"])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert {r["family"] for r in saved["runs"]} == set(instances.FAMILIES)
  assert (tmp_path / "cost_ratio.png").stat().st_size > 0
  assert "| family | n | algorithm |" in capsys.readouterr().out
  for run in res["runs"]:
    algs = run["algorithms"]
    np.testing.assert_allclose(algs["exact"]["ratio"], 1.0, rtol=1e-4)  # exact = OPT
    assert min(algs["greedy"]["ratio"]) >= 1.0 - 1e-4
    assert algs["push_relabel"]["ratio"][-1] < algs["greedy"]["ratio"][-1] + 1e-6
  # A rerun with the same --out resumes: every instance is read back, none recomputed.
  assert len(list((tmp_path / "runs").glob("*.json"))) == len(instances.FAMILIES)
  monkeypatch.setattr(matching_incremental, "run_instance", None)  # fails if called
  again = matching_incremental.main(["--smoke", "--out", str(tmp_path), "--algorithms",
                                     "push_relabel", "exact", "greedy"])
  assert [r["algorithms"]["exact"]["costs"] for r in again["runs"]] == [
      r["algorithms"]["exact"]["costs"] for r in res["runs"]]
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
