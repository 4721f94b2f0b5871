"""The AdaBack experiment: its smoke results (checked on the Colab notebook's run), and
claims() on hand-built results."""

import json
import pathlib

from experiments import adaback


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.adaback --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "adaback.png").exists()
  assert saved["config"]["length"] == 3
  run = saved["runs"][0]
  for arm in adaback.ARMS:
    assert [h["step"] for h in run[arm]] == [2, 4]
    assert all(0.0 <= h["valid"] <= 1.0 for h in run[arm])
  assert all(0.0 <= h["train_rho"] <= 0.9 for h in run["adaback"])
  assert all(h["train_rho"] == 0.0 for h in run["grpo"])  # GRPO reveals nothing
  assert len(adaback.claims(saved)) == 4


def _result(grpo, ada, sft, rho):
  runs = [{"grpo": [{"valid": g}], "adaback": [{"valid": a, "train_rho": r0},
                                               {"valid": a, "train_rho": r1}],
           "sft": [{"valid": s}]} for g, a, s, (r0, r1) in zip(grpo, ada, sft, rho, strict=True)]
  return {"config": {"length": 12}, "runs": runs}


def test_claims_on_hand_built_results():
  held = [c.held for c in adaback.claims(_result([0.0, 0.01], [0.9, 0.7], [0.2, 0.1],
                                                 [(0.6, 0.1), (0.5, 0.2)]))]
  assert held == [True, True, True, True]
  held = [c.held for c in adaback.claims(_result([0.3, 0.0], [0.4, 0.5], [0.9, 0.8],
                                                 [(0.6, 0.7), (0.5, 0.2)]))]
  assert held == [False, False, False, False]
  assert adaback.claims({"config": {"length": 3}, "runs": []}) == []
