"""The fractal-GD experiment end to end at its smallest setting.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the report functions.
"""

import json
import pathlib

import pytest

from experiments import bench_fractal_gd, fractal_gd
from experiments.reporting import Ratio, check_claims


def _check_claims(rows):
  assert len(rows) == 4
  check_claims(rows)


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.fractal_gd --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[fractal_gd]`` runs that notebook's
  ``--smoke`` cell and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["wall_time_s"] > 0 and len(saved["maps"]) == 2 and saved["scale"] == "smoke"
  assert saved["figures"]
  for name in saved["figures"]:
    assert (out / pathlib.Path(name).name).stat().st_size > 0, name
  for row in saved["critical_step"]:  # the bisection brackets sit at the formula
    assert row["bisection_lo"] <= row["formula"] * 1.001
    assert row["bisection_hi"] >= row["formula"] * 0.95
  for row in saved["maps"]:  # the slice crosses the boundary; few starts are left undecided
    assert 0.1 < row["converged"] < 0.9 and row["running"] < 0.02
    assert 0.9 < row["boundary_dimension"] < 1.7
  for row in saved["balance"]:  # converged minimizers respect the stability bound
    assert row["abs_balance_max"] <= row["stability_bound"] + 1e-6
  assert "## Critical step: formula vs bisection" in (out / "summary.md").read_text()
  _check_claims(fractal_gd.claims(saved))  # the report rows work at the smoke scale too


def _synthetic(gap=0.01, lam03_dim=1.3, different=0.02, corr=0.1):
  """Hand-set measurements; the defaults make all four claims hold."""
  maps = [{"lam": lam, "eta_frac": f, "boundary_dimension": d}
          for f in (0.9, 1.0) for lam, dims in ((0.3, (lam03_dim, 1.4)), (0.0, (1.0, 1.02)))
          for d in dims]
  return {
      "critical_step": [{"rel_gap": 0.001}, {"rel_gap": -gap}],
      "maps": maps,
      "sensitivity": [{"lam": 0.0, "eta_frac": 0.9, "different_minimizer": 0.001,
                       "amplification_p99": 10.0},
                      {"lam": 0.0, "eta_frac": 0.99, "different_minimizer": different,
                       "amplification_p99": 100.0}],
      "balance": [{"eta_frac": 0.5, "abs_balance_max": 0.1, "abs_balance_mean": 0.05,
                   "stability_bound": 1.0, "corr_with_start": 0.9},
                  {"eta_frac": 0.99, "abs_balance_max": 0.6, "abs_balance_mean": 0.3,
                   "stability_bound": 1.0, "corr_with_start": corr}],
      "config": {"pairs": 1000}}


def test_claims_on_synthetic_results():
  """Each criterion on hand-set numbers: all hold, then each fails on its own."""
  _check_claims(fractal_gd.claims(_synthetic()))
  assert [r.held for r in fractal_gd.claims(_synthetic())] == [True, True, True, True]
  for change, row in ((dict(gap=0.05), 0), (dict(lam03_dim=1.05), 1),
                      (dict(different=0.005), 2), (dict(corr=0.5), 3)):
    held = [r.held for r in fractal_gd.claims(_synthetic(**change))]
    assert held == [i != row for i in range(4)], change
  empty = fractal_gd.claims({})
  assert len(empty) == 4 and all(r.held is None for r in empty)


def test_ratios_on_a_synthetic_bench():
  row = {"resolution": 64, "reference_s": 1.0, "plain_vmap_s": 4.0, "reference_speedup": 4.0}
  rows = bench_fractal_gd.ratios({"max_steps": 100, "rows": [row]})
  assert len(rows) == 1 and isinstance(rows[0], Ratio) and rows[0].ratio == 0.25
  rows = bench_fractal_gd.ratios({"max_steps": 100, "rows": [
      dict(row, kernel_s=0.5, kernel_speedup=8.0)]})  # GPU/TPU runs add the kernel row
  assert [r.ratio for r in rows] == [0.25, 0.125] and "Pallas" in rows[1].name


def test_bad_seeds():
  with pytest.raises(ValueError, match="--seeds"):
    fractal_gd.main(["--smoke", "--seeds", "0"])
