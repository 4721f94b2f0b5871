"""The quant_optim experiment end to end at its smallest setting.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the report functions.
"""

import json
import os
import pathlib

import numpy as np
import pytest

from experiments import bench_quant_optim, quant_optim
from experiments.reporting import Ratio, check_claims


def _check_claims(rows):
  assert 1 <= len(rows) <= 4
  check_claims(rows)


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.quant_optim --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[quant_optim]`` runs that
  notebook's ``--smoke`` cell and then calls this on its output): tracing and compiling
  its 26 programs twice was the suite's largest duplicate.
  """
  for name in ("results.json", "summary.md", "mantissa_sweep.png", "component_ablation.png",
               "beta2_sweep.png", "mantissa_vs_horizon.png", "mlp_accuracy.png"):
    assert os.path.getsize(out / name) > 0, name
  saved = json.loads((out / "results.json").read_text())
  assert saved["config"]["rosen_steps"] == quant_optim.CONFIGS["smoke"]["rosen_steps"]
  assert len(saved["mantissa_sweep"]["final_loss"]["adam/nearest"]) == 23
  table = (out / "summary.md").read_text()
  assert "| result | headline | detail |" in table and "MLP Adam storage=int8" in table
  # Values, not just shapes: at M = 1 nearest, quantized weights stall the noisy
  # least squares above fp32 (the ablation's W column, component index 1), even
  # after the smoke setting's 40 steps.
  ablation = np.array(saved["ablation"]["final_loss"]["adam/nearest"])  # (M, 4, seeds)
  fp32 = np.median(saved["ablation"]["final_loss"]["adam/fp32"])
  assert ablation[0, 1].mean() > 1.3 * fp32
  assert np.allclose(ablation[-1, 0], fp32, rtol=0.05)  # G at M = 7 ~ fp32
  _check_claims(quant_optim.claims(saved))  # the report rows work at the smoke scale too


def _synthetic(slope=1.0, v_ratio=3.0, beta2_big=2.0, muon_seed1=0.5):
  """Hand-set measurements (2 seeds); the defaults make all four claims hold."""
  return {
      "config": {"seeds": 2},
      "horizon": {"adam": {"rows": [{"T": 125, "m_star": 8}, {"T": 250, "m_star": 9},
                                    {"T": 500, "m_star": 10}],
                           "slope_per_doubling": slope, "r2": 0.9},
                  "muon": {"rows": [{"T": 125, "m_star": 5}], "slope_per_doubling": 0.0,
                           "r2": 0.0}},
      # one component at a time (G, W, M, V) at the smallest M: loss / fp32 (= 1)
      "ablation": {"mantissas": [1, 7],
                   "final_loss": {"adam/nearest": [[[1.0, 1.0], [2.0, 2.0], [1.05, 1.05],
                                                    [v_ratio, v_ratio]]] * 2,
                                  "adam/fp32": [1.0, 1.0]}},
      # (beta2, M, seeds) with M = 3, 7, 23 (fp32)
      "beta2": {"beta2": [0.9, 0.999], "mantissas": [3, 7, 23],
                "final_loss": {"nearest": [[[5.0, 5.0], [1.0, 1.0], [1.0, 1.0]],
                                           [[9.0, 9.0], [beta2_big] * 2, [1.0, 1.0]]]}},
      "mantissa_sweep": {"mantissas": [3, 7, 23],
                         "final_loss": {"adam/nearest": [[9.0, 9.0], [1.0, 1.0], [0.1, 0.1]],
                                        "muon/nearest": [[5.0, 5.0], [0.5, muon_seed1],
                                                         [0.1, 0.1]]}}}


def test_claims_on_synthetic_results():
  """Each criterion on hand-set numbers: all hold, then each fails on its own."""
  rows = quant_optim.claims(_synthetic())
  _check_claims(rows)
  assert [r.held for r in rows] == [True, True, True, True]
  assert "order V > W > M > G" in rows[1].measured and "Muon lower in 2/2" in rows[3].measured
  for change, row in ((dict(slope=-0.5), 0), (dict(v_ratio=1.02), 1), (dict(beta2_big=1.05), 2),
                      (dict(muon_seed1=1.5), 3)):
    held = [r.held for r in quant_optim.claims(_synthetic(**change))]
    assert held == [i != row for i in range(4)], change
  saturated = _synthetic()
  saturated["horizon"]["adam"]["rows"][-1]["m_star"] = 23  # M* not measurable: no verdict
  assert quant_optim.claims(saturated)[0].held is None


def test_ratios_on_a_synthetic_bench():
  result = {"rows": {"optax.adam": {"opt_step_ratio": 1.0, "train_step_ratio": 1.0,
                                    "state_bytes_ratio": 1.0},
                     "storage int8": {"opt_step_ratio": 3.5, "train_step_ratio": 1.2,
                                      "state_bytes_ratio": 0.254},
                     "pallas": {"opt_step_ratio": 0.5, "train_step_ratio": None,
                                "state_bytes_ratio": 1.0}}}
  rows = bench_quant_optim.ratios(result)
  assert [(r.name.split(":")[0], r.ratio) for r in rows] == [("storage int8", 3.5),
                                                             ("pallas", 0.5)]
  assert all(isinstance(r, Ratio) for r in rows)
  assert "state bytes 0.254x" in rows[0].note and "whole training step n/a" in rows[1].note


def test_bad_flags():
  with pytest.raises(SystemExit):
    quant_optim.main(["--dataset", "imagenet"])
  with pytest.raises(ValueError, match="seeds"):
    quant_optim.main(["--smoke", "--seeds", "0"])


def test_summary_drops_muons_v_column_in_every_ablation_row():
  # Muon quantizes V only for non-matrix parameters, and the ablation problem has none: its
  # V ratio measures nothing, in the stochastic row as in the nearest ones (issue 42)
  import json
  import pathlib

  path = (pathlib.Path(__file__).parents[2] / "docs" / "results" / "run_all" / "quick"
          / "quant_optim" / "results.json")
  rows, _ = quant_optim.summarize(json.loads(path.read_text()))
  muon = [r for r in rows if r[0].startswith("Ablation muon")]
  adam = [r for r in rows if r[0].startswith("Ablation adam")]
  assert len(muon) == len(adam) >= 2
  assert all("V: n/a" in r[2] and "V: 1" not in r[2] and "V: 0" not in r[2] for r in muon)
  assert all("V: n/a" not in r[2] and ", V: " in r[2] for r in adam)
