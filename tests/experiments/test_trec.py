"""The TREC experiment end to end at its smallest setting.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the placements and the report
rows.
"""

import json
import pathlib

import numpy as np
import pytest

from experiments import trec as exp
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.trec --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[trec]`` runs that notebook's
  ``--smoke`` cell and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  for name in ("trec_curves.png", "curriculum.png", "summary.md"):
    assert (out / name).stat().st_size > 0
  assert "| schedule | tau/T |" in (out / "summary.md").read_text()
  cfg = {**exp.COMMON, **exp.CONFIGS["smoke"]}
  steps = cfg["steps"]
  configs = saved["trec"]["configs"]
  assert [(r["schedule"], r["tau_frac"]) for r in configs] == [
      (k, t) for k in exp.SCHEDULES for t in cfg["tau_fracs"]]
  assert sum(r["calibration_config"] for r in configs) == 1
  for r in configs:
    measured = np.asarray(r["measured"])
    assert measured.shape == (steps,) and np.isfinite(measured).all()
    # a next-token loss of a model that has learned something, below uniform guessing
    assert 0.5 < measured.mean() < np.log(cfg["vocab"])
    assert r["final_train_loss"] < np.log(cfg["vocab"])
    for pred in r["predicted"].values():
      assert min(pred) == pytest.approx(-1.0) and max(pred) <= 0.0
    for corr in r["corr"].values():
      assert all(-1.0 <= v <= 1.0 for v in corr.values())
    assert all(0.0 <= v < 1.0 for v in r["argmin_frac"].values())
    assert r["tau_steps"] == pytest.approx(r["tau_frac"] * steps)
  phi = saved["trec"]["forgetting"]
  assert phi * cfg["peak_lr"] * steps in cfg["forgetting_grid"]
  # curriculum: every (slice, placement) with one HQ loss per seed and gains paired with "end"
  rows = saved["curriculum"]
  assert [(r["slice_frac"], r["arm"]) for r in rows] == [
      (f, a) for f in cfg["slice_fracs"] for a in cfg["arms"]]
  for r in rows:
    n = round(r["slice_frac"] * steps)
    assert 0 <= r["start"] <= steps - n
    assert len(r["hq_loss"]["per_seed"]) == cfg["seeds"]
    assert 0.5 < r["hq_loss"]["mean"] < np.log(cfg["vocab"])
    if r["arm"] == "end":
      assert r["start"] == steps - n and r["gain_vs_end"]["mean"] == 0.0
  # placements are distinct runs: different slices give different HQ losses
  by_arm = {r["arm"]: r["hq_loss"]["per_seed"] for r in rows if r["slice_frac"] == 0.1}
  assert by_arm["end"] != by_arm["predicted_ema"]


def test_placements_follow_the_predictor():
  cfg = {**exp.COMMON, **exp.CONFIGS["quick"], "steps": 600}  # the hand-checked T = 600
  lrs = exp.schedule("wsd", cfg)
  wd = exp.weight_decay(cfg["curriculum_tau_frac"], cfg)
  assert wd * cfg["peak_lr"] * cfg["steps"] == pytest.approx(2.0)
  arms = exp.placements(cfg, lrs, wd, phi=1.0, n=60)
  assert arms["end"] == 540
  # the EMA window sits before the end of the WSD decay, and more forgetting moves it later
  assert 300 < arms["predicted_ema"] < arms["predicted_calibrated"] <= 540


def _synthetic(weak_r=0.3, gain_min_3=0.05):
  """One strong- and one weak-decay TREC config, 3% and 10% slices over 2 seeds."""
  corr = lambda r: {"ema": {"pearson_smoothed": r}, "calibrated": {"pearson_smoothed": r}}
  configs = [{"schedule": "wsd", "tau_frac": 0.05, **{"corr": corr(0.9)}},
             {"schedule": "cosine", "tau_frac": 0.5, **{"corr": corr(weak_r)}}]
  curriculum = []
  for frac, ema_loss, gain_min in ((0.03, [1.9, 2.0], gain_min_3), (0.1, [2.05, 2.0], -0.05)):
    loss = lambda v: {"per_seed": v, "mean": float(np.mean(v))}
    curriculum += [{"slice_frac": frac, "arm": "end", "start_frac": 0.9,
                    "hq_loss": loss([2.0, 2.05]), "gain_vs_end": {"min": 0.0}},
                   {"slice_frac": frac, "arm": "predicted_ema", "start_frac": 0.6,
                    "hq_loss": loss(ema_loss), "gain_vs_end": {"min": gain_min}}]
  return {"trec": {"configs": configs}, "config": {"trec_seeds": 2, "seeds": 2},
          "curriculum": curriculum}


def test_claims_on_synthetic_results():
  """Strong decay predicted, weak not; the 3% slice gains in every seed, the 10% does not."""
  rows = exp.claims(_synthetic())
  assert len(rows) == 4  # EMA shape at strong / weaker decay, then the 3% and 10% slices
  check_claims(rows)
  assert [row.held for row in rows] == [True, False, True, False]
  assert "3%" in rows[2].claim and "10%" in rows[3].claim
  assert [row.held for row in exp.claims(_synthetic(weak_r=0.6, gain_min_3=-0.01))] == [
      True, True, False, False]
