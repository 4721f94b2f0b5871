"""The matching experiment end to end at its smallest setting, and the instances."""

import json
import pathlib

import numpy as np
import pytest

from experiments import bench_matching, matching_incremental
from experiments.common import Ratio, check_claims
from jaxlab.matching import instances

ROOT = pathlib.Path(__file__).parents[2]


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


def test_claims_on_the_recorded_quick_run():
  result = json.loads((ROOT / "docs/results/matching_incremental/quick/results.json").read_text())
  rows = matching_incremental.claims(result)
  _check_claims(rows)
  # This run's verdicts: near OPT on every family; far below greedy; the exact tail
  # makes the final cost worse; but exact is faster than push-relabel on CPU.
  assert [r.held for r in rows] == [True, True, True, False]
  assert "clustered/1000 1.030 ± 0.003" in rows[0].measured  # sample std over 2 seeds


def test_ratios_on_the_recorded_bench():
  result = json.loads((ROOT / "docs/results/matching_incremental/bench/results.json").read_text())
  rows = bench_matching.ratios(result)
  assert len(rows) == 8  # numpy anchor at n = 1000 and 2000 only
  for row in rows:
    assert isinstance(row, Ratio) and row.name and row.ratio > 0
  by_name = {r.name: r.ratio for r in rows}
  assert by_name["exact (all n insertions) vs one scipy solve, n = 10000"] == pytest.approx(
      10.45 / 29.14, rel=1e-3)
  assert by_name["exact vs the same step in numpy, n = 1000"] < 1
