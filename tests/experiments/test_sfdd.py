"""The SFDD experiment: its smoke results (checked on the Colab notebook's run), and
claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import sfdd


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.sfdd --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "sfdd.png").exists()
  assert saved["config"]["symbols"] == 8
  arms = saved["runs"][0]["arms"]
  assert set(arms) == set(sfdd.ARM_NAMES)
  n = saved["config"]["samples"]
  for name, _, retain in sfdd.ARMS:
    a = arms[name]
    assert a["kept"] == round(retain * n)
    assert a["steps"] == saved["config"]["epochs"] * -(-a["kept"] // saved["config"]["batch"])
    assert 0.0 < a["alpha"] <= 1.0 and 1.0 <= a["tau"] <= sfdd.GAMMA + 1
  # the flattest subsets nest: 30% within 50% within 70% of the same ranking
  assert arms["sfdd_30"]["kept"] < arms["sfdd_50"]["kept"] < arms["sfdd_70"]["kept"]
  assert -1.0 <= saved["runs"][0]["rank_corr_entropy"] <= 1.0
  assert len(sfdd.claims(saved)) == 3


def _result(tau: dict[str, list[float]]) -> dict:
  seeds = len(next(iter(tau.values())))
  runs = [{"arms": {a: {"tau": tau.get(a, [2.0] * seeds)[s], "alpha": 0.5}
                    for a in sfdd.ARM_NAMES}} for s in range(seeds)]
  return {"runs": runs}


def test_claims_on_hand_built_results():
  good = _result({"full": [3.0, 3.1], "sfdd_50": [2.95, 3.05], "random_50": [2.7, 2.8],
                  "entropy_50": [2.8, 2.9]})
  assert [c.held for c in sfdd.claims(good)] == [True, True, True]
  # beats random on average but not in every seed; loses to entropy; 10% below full
  bad = _result({"full": [3.3, 3.3], "sfdd_50": [3.0, 2.9], "random_50": [2.7, 2.95],
                 "entropy_50": [3.1, 3.0]})
  assert [c.held for c in sfdd.claims(bad)] == [False, False, False]
  assert np.isclose(1 - 2.95 / 3.3, 0.106, atol=1e-3)
  assert sfdd.claims({"runs": []}) == []
