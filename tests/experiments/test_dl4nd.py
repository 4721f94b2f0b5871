"""The DL4ND experiment: its smoke results (checked on the Colab notebook's run), and
claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import dl4nd


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.dl4nd --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "dl4nd.png").exists()
  assert saved["config"]["steps"] == 20
  split = saved["runs"][0]["angle_sets"]["right"]["0"]
  assert abs(split["noise_rate"] - 0.3) < 0.01
  assert abs(split["label_acc/noisy"] - (1 - split["noise_rate"])) < 1e-5
  for arm in dl4nd.ARMS:
    assert 0.0 <= split[f"id_acc/{arm}"] <= 1.0 and 0.0 <= split[f"ood_acc/{arm}"] <= 1.0
  for arm, *_ in dl4nd.RELABELS:
    assert 0.0 <= split[f"label_acc/{arm}"] <= 1.0
  assert len(dl4nd.claims(saved)) == 4  # right-angle domains only: no 15-degree claim


def _split(**kw) -> dict:
  base = {"id_acc/clean": 0.92, "id_acc/erm": 0.64, "ood_acc/clean": 0.42,
          "ood_acc/erm": 0.26, "ood_acc/cross": 0.31, "id_acc/cross": 0.75,
          "label_acc/cross": 0.9, "label_acc/within": 0.8, "label_acc/all": 0.85,
          "label_acc/noisy": 0.7, "nearest_acc/cross": 0.9, "nearest_acc/within": 0.9}
  return {**base, **kw}


def _result(per_seed: list[list[dict]], sets=("right", "small")) -> dict:
  return {"runs": [{"angle_sets": {s: {str(d): sp for d, sp in enumerate(splits)}
                                   for s in sets}} for splits in per_seed]}


def test_claims_on_hand_built_results():
  good = _result([[_split(), _split()], [_split(), _split(**{"ood_acc/erm": 0.3})]])
  assert [c.held for c in dl4nd.claims(good)] == [True, True, True, True, True]
  # noise costs only 3 points in one seed; within beats cross on average; all-sample proxies
  # win in one seed; DL4ND below ERM out of domain on average
  bad = _result([[_split(**{"id_acc/erm": 0.89, "label_acc/within": 0.95,
                            "label_acc/all": 0.95, "ood_acc/cross": 0.2})],
                 [_split(**{"label_acc/within": 0.85, "ood_acc/cross": 0.27})]])
  assert [c.held for c in dl4nd.claims(bad)] == [False, False, False, False, False]
  # the mean over held-out domains decides each seed: one split below, the mean above
  mixed = _result([[_split(**{"label_acc/cross": 0.75}), _split(**{"label_acc/cross": 0.95})]],
                  sets=("right",))
  rows = dl4nd.claims(mixed)
  assert len(rows) == 4 and rows[1].held is True
  assert np.isclose(np.mean([0.75, 0.95]), 0.85)
  assert dl4nd.claims({"runs": []}) == []
