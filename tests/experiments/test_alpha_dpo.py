"""The alpha-DPO experiment end to end at its smallest setting (its tasks: tests/data).

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the flags and the report rows.
"""

import json
import pathlib

import numpy as np
import pytest

from experiments import alpha_dpo as E
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.alpha_dpo --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[alpha_dpo]`` runs that notebook's
  ``--smoke`` cell and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["wall_time_s"] > 0 and saved["scale"] == "smoke"
  assert saved["figures"]
  for name in saved["figures"]:
    assert (out / pathlib.Path(name).name).stat().st_size > 0, name
  mix = saved["tasks"]["mixture"]
  cfg = E.CONFIGS["smoke"]
  flips, seeds = cfg["flips"], cfg["seeds"]
  betas = cfg["tasks"]["mixture"]["betas"]
  assert len(mix["rows"]) == len(E.METHODS) * len(betas) * len(flips) * seeds
  assert mix["pair_reward_gap"] > 0  # clean labels prefer the higher-reward sample
  for row in mix["rows"]:
    assert 0.0 <= row["reward"] <= 1.0 and 0.0 <= row["off_manifold"] <= 1.0
    assert row["mode_kl"] >= 0 and len(row["reward_curve"]) == cfg["tasks"]["mixture"][
        "snapshots"]
    kind = E.METHODS[row["method"]]["loss"]
    expected = {"dpo": 0.0, "alpha": 0.5}.get(kind)
    if expected is None:  # dynamic: alpha_0 * mean p, in (0, 1)
      assert 0.0 < row["alpha_final"] < 1.0
    else:
      assert row["alpha_final"] == pytest.approx(expected)
  acc = {f: np.mean([r["implicit_acc"] for r in mix["rows"] if r["flip"] == f]) for f in flips}
  assert acc[flips[0]] > acc[flips[-1]]  # clean labels are fit better than 40 % flipped
  assert len(mix["claim"]) == (len(E.METHODS) - 1) * len(betas)
  for v in mix["claim"]:  # the verdict follows from the per-seed drops it reports
    assert v["verdict"] in ("holds", "does not hold", "inconclusive")
    assert (v["verdict"] == "holds") == (v["seeds_less"] == v["seeds"])
    assert v["diff_mean"] == pytest.approx(v["drop_alpha"] - v["drop_dpo"], abs=1e-9)
  table = (out / "summary.md").read_text()  # the tables the run printed
  assert "## mixture: reward of generated samples" in table and "gain kept" in table
  assert "the claim, per beta" in table


def test_bad_seeds():
  with pytest.raises(ValueError, match="--seeds"):
    E.main(["--smoke", "--seeds", "0"])


def _synthetic(dynamic_noisy=(0.55, 0.5)):
  """Rewards per (method, beta, flip, seed): Diffusion-DPO drops 0.9 -> 0.4 (0.5) in both
  seeds, alpha-DPO 0.5 -> 0.8 (0.1); the dynamic variant ends at ``dynamic_noisy``."""
  noisy = {"Diffusion-DPO": (0.4, 0.4), "alpha-DPO (alpha=0.5)": (0.8, 0.8),
           "alpha-DPO (dynamic)": dynamic_noisy}
  rows = [{"method": m, "beta": 10.0, "flip": f, "seed": s,
           "reward": 0.9 if f == 0.0 else noisy[m][s]}
          for m in E.METHODS for f in (0.0, 0.4) for s in range(2)]
  return {"config": {"flips": [0.0, 0.4]}, "tasks": {"mixture": {"betas": [10.0], "rows": rows}}}


def test_claims_on_synthetic_results():
  rows = E.claims(_synthetic())
  assert len(rows) == len(E.METHODS) - 1  # one per alpha-DPO variant
  check_claims(rows)
  # alpha lost less in both seeds; dynamic lost 0.35 / 0.4 < 0.5 in both: holds too
  assert [row.held for row in rows] == [True, True]
  assert "lost less in 2/2 seeds" in rows[0].measured
  # dynamic lost more than Diffusion-DPO in both seeds: does not hold; in one: inconclusive
  assert [row.held for row in E.claims(_synthetic((0.3, 0.2)))] == [True, False]
  assert [row.held for row in E.claims(_synthetic((0.3, 0.6)))] == [True, None]


def test_digits_only_where_the_scale_has_it(tmp_path):
  with pytest.raises(ValueError, match="--tasks"):
    E.main(["--quick", "--tasks", "digits", "--out", str(tmp_path)])
