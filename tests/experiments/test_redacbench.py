"""The RedacBench experiment: its smoke output, and claims() on hand-built results.

Its ``--smoke`` run executes once per suite, inside its Colab notebook's test
(``tests/colab/test_notebooks.py::test_notebook_runs[redacbench]``), which checks it with
:func:`check_smoke_results`; the rest of this module tests the report rows.
"""

import json
import pathlib

import numpy as np

from experiments import redacbench
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.redacbench --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "redacbench.png").stat().st_size > 0
  arms = saved["runs"][0]["arms"]
  assert list(arms) == redacbench.arm_names(saved["config"]["passes"])
  for a in arms.values():
    assert 0.0 <= a["all/micro/security"] <= 1.0 and 0.0 <= a["all/micro/utility"] <= 1.0
    tp, tn, fp, fn = a["counts"]
    assert np.isclose(a["all/micro/security"], tn / (tn + fp))
    assert np.isclose(a["all/micro/utility"], tp / (tp + fn))
  # masking never loses a non-sensitive proposition; the oracle step leaks nothing
  assert arms["mask"]["all/micro/utility"] == 1.0
  assert arms["oracle"]["all/micro/security"] == 1.0
  assert len(check_claims(redacbench.claims(saved))) == 3


def _result(values: dict[str, list[tuple[float, float, float]]], passes: int = 3) -> dict:
  """Per arm and seed: (Security, Utility, Security on implied), micro."""
  seeds = len(next(iter(values.values())))
  runs = [{"arms": {arm: {"all/micro/security": v[s][0], "all/micro/utility": v[s][1],
                          "implied/micro/security": v[s][2]} for arm, v in values.items()}}
          for s in range(seeds)]
  return {"config": {"passes": passes}, "runs": runs}


def test_claims_on_hand_built_results():
  good = _result({"mask": [(0.6, 1.0, 0.4), (0.62, 0.99, 0.45)],
                  "rewrite_1": [(0.9, 0.5, 0.9), (0.92, 0.6, 0.9)],
                  "rewrite_3": [(0.97, 0.45, 0.97), (0.95, 0.55, 0.96)]})
  assert [c.held for c in redacbench.claims(good)] == [True, True, True]
  # masking leaks little (no failure); the rewriter keeps everything; iteration gains nothing
  bad = _result({"mask": [(0.9, 1.0, 0.8), (0.9, 1.0, 0.8)],
                 "rewrite_1": [(0.95, 1.0, 0.9), (0.5, 0.9, 0.5)],
                 "rewrite_3": [(0.95, 0.9, 0.9), (0.6, 0.95, 0.6)]})
  assert [c.held for c in redacbench.claims(bad)] == [False, False, False]
  assert redacbench.claims({"config": {"passes": 3}, "runs": []}) == []
