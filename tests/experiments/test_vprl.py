"""The VPRL experiment: its smoke results (checked on the Colab notebook's run), and claims()
on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import vprl


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.vprl --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "vprl.png").exists()
  assert saved["config"]["train_maps"] == 16
  run = saved["runs"][0]
  assert set(run["arms"]) == set(vprl.ARMS)
  for arm in vprl.ARMS:
    a = run["arms"][arm]
    for metric in ("exact_match", "progress_rate", "sample_valid", "live_groups"):
      assert 0.0 <= a[metric] <= 1.0
    assert a["sample_progress"] <= a["sample_valid"]
    assert 0.0 <= a["action_entropy"] <= np.log(4) + 1e-6
  assert len(run["grpo"]["reward"]) == saved["config"]["grpo_iters"]
  assert all(-5.0 <= r <= 1.0 for r in run["grpo"]["reward"])
  assert run["test_optimal_length"] >= 2  # min_distance
  assert len(vprl.claims(saved)) == 5


def _result(em, pr, live, valid):
  seeds = len(em["vprl"])
  runs = [{"arms": {a: {"exact_match": em[a][s], "progress_rate": pr[a][s],
                        "live_groups": live[a][s], "sample_valid": valid[a][s],
                        "action_entropy": 0.5}
                    for a in vprl.ARMS}} for s in range(seeds)]
  return {"runs": runs}


def test_claims_on_hand_built_results():
  good = _result(em={"vprl": [0.8, 0.7], "vpft": [0.5, 0.6], "stage1": [0.1, 0.0]},
                 pr={"vprl": [0.9, 0.8], "vpft": [0.7, 0.7], "stage1": [0.2, 0.1]},
                 live={"vprl": [0.3, 0.3], "vpft": [0.2, 0.1], "stage1": [0.6, 0.5]},
                 valid={"vprl": [0.9, 0.8], "vpft": [0.7, 0.7], "stage1": [0.5, 0.4]})
  assert [c.held for c in vprl.claims(good)] == [True] * 5
  bad = _result(em={"vprl": [0.4, 0.5], "vpft": [0.5, 0.6], "stage1": [0.6, 0.7]},
                pr={"vprl": [0.5, 0.5], "vpft": [0.7, 0.7], "stage1": [0.2, 0.1]},
                live={"vprl": [0.3, 0.3], "vpft": [0.6, 0.5], "stage1": [0.2, 0.1]},
                valid={"vprl": [0.4, 0.5], "vpft": [0.7, 0.7], "stage1": [0.5, 0.4]})
  # VPRL's valid share: higher in one seed, equal mean: not held
  assert [c.held for c in vprl.claims(bad)] == [False] * 5
  assert "higher in 0/2 seeds" in vprl.claims(bad)[0].measured
  assert vprl.claims({"runs": []}) == []
