"""The SatDreamer360 experiment: its smoke results (checked on the Colab notebook's run),
and claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import satdreamer


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.satdreamer --smoke`` must have written under ``out`` (the
  smoke run executes once per suite, in the Colab notebook's test, which calls this on its
  output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "satdreamer.png").exists()
  assert saved["config"]["size"] == 8
  run = saved["runs"][0]
  assert set(run["semantic"]) == set(satdreamer.ARMS)
  for arm in satdreamer.ARMS:
    iou = [x for x in run["semantic"][arm]["iou"] if x is not None]
    assert np.isclose(run["semantic"][arm]["miou"], np.mean(iou))
  assert abs(sum(run["test_class_share"]) - 1.0) < 1e-6
  corr = run["corr"]
  assert set(corr["epipolar"]) == {"4", "16"}
  for ref in satdreamer.REFS:
    assert corr["full"][ref]["recall"] == 1.0
    # more candidates never lose the true match
    assert corr["epipolar"]["4"][ref]["recall"] <= corr["epipolar"]["16"][ref]["recall"]
    assert 0.0 <= corr["epipolar"]["16"][ref]["exact"] <= corr["epipolar"]["16"][ref]["near"]
  n = saved["config"]["height"] * saved["config"]["width"]
  assert run["flops_per_query"]["full"]["total"] == 4 * 8 * n + 3 * n
  assert len(satdreamer.claims(saved)) == 5


def test_scores_on_a_hand_built_confusion_matrix():
  conf = np.zeros((5, 5))
  conf[0, 0], conf[0, 1], conf[1, 1], conf[3, 3], conf[3, 0] = 4, 1, 3, 2, 2
  got = satdreamer.scores(conf)
  assert np.isclose(got["accuracy"], 9 / 12)
  # IoU: class 0: 4 / (5 + 6 - 4), class 1: 3 / (3 + 4 - 3), class 3: 2 / 4; 2 and 4 absent
  assert np.isclose(got["miou"], np.mean([4 / 7, 3 / 4, 2 / 4]))
  assert got["iou"][2] is None and got["iou"][4] is None


def _result(tri, glob, bev, oracle_acc, full, epi, m=128, n=1024, dim=32):
  runs = []
  for s in range(len(tri)):
    corr_e = {ref: {"exact": epi[s], "near": epi[s], "recall": 0.99} for ref in satdreamer.REFS}
    corr_f = {ref: {"exact": full[s], "near": full[s], "recall": 1.0} for ref in satdreamer.REFS}
    runs.append({
        "semantic": {"triplane": {"miou": tri[s], "accuracy": 0.8},
                     "global": {"miou": glob[s], "accuracy": 0.7},
                     "bev": {"miou": bev[s], "accuracy": 0.7}},
        "oracle_flat_world": {"accuracy": oracle_acc[s], "miou": 0.5},
        "corr": {"full": corr_f, "epipolar": {str(m): corr_e}},
        "flops_per_query": {"full": {"total": 4 * dim * n + 3 * n},
                            str(m): {"total": 4 * dim * m + 3 * m + 15 + 6 * n}}})
  return {"config": {"candidates": m}, "runs": runs}


def test_claims_on_hand_built_results():
  good = _result([0.6, 0.62], [0.4, 0.45], [0.5, 0.55], [0.7, 0.75], [0.50, 0.52],
                 [0.49, 0.52])
  assert [c.held for c in satdreamer.claims(good)] == [True, True, True, True, True]
  # oracle right on 95%; triplane loses to global in one seed and to BEV on average;
  # epipolar 5 points below full; and M = N costs more than full attention
  bad = _result([0.6, 0.5], [0.55, 0.55], [0.7, 0.7], [0.95, 0.95], [0.50, 0.52],
                [0.45, 0.47], m=1024)
  assert [c.held for c in satdreamer.claims(bad)] == [False, False, False, False, False]
  # (4 * 32 * 128 + 3 * 128 + 15 + 6 * 1024) / (4 * 32 * 1024 + 3 * 1024) = 22927 / 134144
  assert "22,927 vs 134,144" in satdreamer.claims(good)[4].measured
  assert "0.17x" in satdreamer.claims(good)[4].measured
  assert satdreamer.claims({"runs": []}) == []
