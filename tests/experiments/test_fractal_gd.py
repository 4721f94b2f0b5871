"""The fractal-GD experiment end to end at its smallest setting."""

import json

import pytest

from experiments import fractal_gd


def test_smoke_run(tmp_path, capsys):
  res = fractal_gd.main(["--smoke", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["wall_time_s"] > 0 and len(saved["maps"]) == 2
  for name in res["figures"]:
    assert (tmp_path / name).stat().st_size > 0
  for row in res["critical_step"]:  # the bisection brackets sit at the formula
    assert row["bisection_lo"] <= row["formula"] * 1.001
    assert row["bisection_hi"] >= row["formula"] * 0.95
  for row in res["maps"]:  # the slice crosses the boundary; few starts are left undecided
    assert 0.1 < row["converged"] < 0.9 and row["running"] < 0.02
    assert 0.9 < row["boundary_dimension"] < 1.7
  for row in res["balance"]:  # converged minimizers respect the stability bound
    assert row["abs_balance_max"] <= row["stability_bound"] + 1e-6
  assert "## Critical step: formula vs bisection" in capsys.readouterr().out


def test_bad_seeds():
  with pytest.raises(ValueError, match="--seeds"):
    fractal_gd.main(["--smoke", "--seeds", "0"])
