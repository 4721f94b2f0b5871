"""The ATA experiment: its smoke results (the smoke run executes in the Colab notebook's
test, which checks it with :func:`check_smoke_results`) and claims() on hand-built
results."""

import json
import pathlib

import numpy as np

from experiments import ata


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.ata --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "ata.png").stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["arms"]) == {str(m) for m in ata.TEST_MS}
  for m in ata.TEST_MS:
    assert set(run["arms"][str(m)]) == set(ata.ARMS)
    for arm in run["arms"][str(m)].values():
      assert abs(sum(arm[c] for c in ("correct", "mixed", "wrong", "omitted")) - 1) < 1e-9
      assert len(arm["by_index"]) == m
      assert np.isclose(np.mean(arm["by_index"]), arm["correct"])
  assert len(ata.claims(saved)) == 5


def _arm(correct=0.3, mixed=0.2, wrong=0.2):
  return {"correct": correct, "mixed": mixed, "wrong": wrong,
          "omitted": 1 - correct - mixed - wrong, "by_index": [correct] * 3, "key_moved": 0.5}


def _result(seeds, in_dist, **arms):
  return {"runs": [{"in_dist_m2": in_dist[s],
                    "arms": {str(m): {a: _arm(**{k: v[s] for k, v in arms.get(a, {}).items()})
                                      for a in ata.ARMS} for m in ata.TEST_MS}}
                   for s in range(seeds)]}


def test_claims_on_hand_built_results():
  good = _result(2, [0.95, 0.9], direct={"correct": [0.3, 0.2], "mixed": [0.3, 0.3]},
                 ata={"correct": [0.5, 0.45], "mixed": [0.1, 0.1], "wrong": [0.1, 0.1]},
                 random_heads={"correct": [0.25, 0.2]}, wrong_key={"correct": [0.1, 0.1]},
                 no_mutual={"correct": [0.4, 0.4]}, no_dynamic={"correct": [0.35, 0.3]})
  assert [c.held for c in ata.claims(good)] == [True] * 5
  # a seed where direct is already good; ATA no better; random heads better than ATA;
  # a mask that does not matter
  bad = _result(2, [0.95, 0.9], direct={"correct": [0.3, 0.85], "mixed": [0.1, 0.1],
                                        "wrong": [0.0, 0.0]},
                ata={"correct": [0.4, 0.5]}, random_heads={"correct": [0.6, 0.6]},
                no_mutual={"correct": [0.5, 0.5]}, no_dynamic={"correct": [0.1, 0.1]})
  assert [c.held for c in ata.claims(bad)] == [False] * 5
  assert ata.claims({"runs": []}) == []
