"""The G-NLL experiment: its smoke results (the smoke run executes in the Colab notebook's
test, which checks it with :func:`check_smoke_results`) and claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import g_nll


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.g_nll --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["config"]["entities"] == 24 and (out / "g_nll.png").stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["auroc"]) == {k for k, _ in g_nll.SCORES}
  c = saved["config"]
  max_new = 6 + 1  # answers of at most 6 words and EOS
  # costs: one pass per decoded token, the samples' N times a decode's
  assert 1 <= run["passes"]["greedy"] <= max_new
  assert c["samples"] <= run["passes"]["samples"] <= c["samples"] * max_new
  assert c["beam"] <= run["passes"]["beam"] <= c["beam"] * max_new
  assert 0.0 <= run["accuracy"] <= 1.0
  assert sum(b["questions"] for b in run["by_exposure"].values()) == 2 * c["entities"]
  assert sum(run["greedy_length_counts"]) == 2 * c["entities"]
  assert len(g_nll.claims(saved)) == 4


def _result(aurocs: dict[str, list[float]], accuracy=(0.5, 0.5), greedy=(5.0, 5.0),
            samples=(50.0, 50.0)) -> dict:
  seeds = len(accuracy)
  runs = [{"auroc": {k: aurocs.get(k, [0.8] * seeds)[s] for k, _ in g_nll.SCORES},
           "accuracy": accuracy[s],
           "passes": {"greedy": greedy[s], "samples": samples[s], "one_sample": 5.0,
                      "beam": 80.0}} for s in range(seeds)]
  return {"config": {"samples": 10}, "runs": runs}


def test_claims_on_hand_built_results():
  good = _result({"g_nll": [0.85, 0.86], "ln_g_nll": [0.80, 0.84], "pe": [0.84, 0.82],
                  "ln_pe": [0.80, 0.81], "se": [0.86, 0.87], "dse": [0.85, 0.85]})
  # SE beats G-NLL by 0.01 on average: within MATCH (0.02), so "matches" holds
  assert [c.held for c in g_nll.claims(good)] == [True, True, True, True]
  # SE 0.03 better; 20 samples of 5 tokens vs greedy of 20; LN better in one seed;
  # accuracy 90%
  bad = _result({"g_nll": [0.85, 0.86], "ln_g_nll": [0.80, 0.87], "se": [0.88, 0.89]},
                accuracy=(0.9, 0.9), greedy=(20.0, 20.0), samples=(100.0, 100.0))
  assert [c.held for c in g_nll.claims(bad)] == [False, False, False, False]
  assert g_nll.claims({"runs": []}) == []


def test_a_seed_with_one_class_counts_as_no_auroc():
  res = _result({"g_nll": [0.85, 0.86]})
  res["runs"][1]["auroc"] = {k: None for k, _ in g_nll.SCORES}
  assert np.isnan(g_nll._per_seed(res, "g_nll")[1])
  assert g_nll.claims(res)[0].held is False
