"""The CARE experiment.

Its ``--smoke`` pipeline runs once per suite, in its Colab notebook
(``tests/colab/test_notebooks.py::test_notebook_runs[care]``), which then calls
:func:`check_smoke_results` on the output; the rest of this module tests claims() on
hand-built results."""

import json
import pathlib

from experiments import care as cx


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.care --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "care.png").stat().st_size > 0
  run, cfg = saved["runs"][0], saved["config"]
  pipe = run["pipeline"]
  assert len(pipe["acc_tau"]) == len(pipe["kept_tau"]) == len(cx.TAUS)
  assert all(0.0 <= a <= 1.0 for a in pipe["acc_tau"])
  # thresholds only drop masks: the kept share never grows with tau; above 1 none is kept
  kept = pipe["kept_tau"]
  assert all(a >= b for a, b in zip(kept, kept[1:], strict=False)) and kept[-1] == 0.0
  # with every mask dropped the pipeline is the end-to-end network (the global view)
  assert pipe["acc_tau"][-1] == pipe["view_acc"]["global"]
  assert 0.0 <= pipe["confidence_quartiles"][0] <= pipe["confidence_quartiles"][-1] <= 1.0
  assert set(run["rl"]) == set(cx.ARMS)
  for rec in run["rl"].values():
    assert 0.0 <= rec["exact"] <= rec["f1"] + 1e-6 <= 1.0 + 1e-6
    assert 0.0 <= rec["greedy_below"] <= 1.0 and rec["greedy_gap"] >= -1e-6
  assert len(run["rl_reward_curve"]) == len(cx.ARMS)
  assert len(run["rl_reward_curve"][0]) == cfg["rl_steps"]
  assert len(cx.claims(saved)) == 6


def _result(acc_tau, kept_tau, high_low, exact, below=(0.05, 0.05)) -> dict:
  runs = []
  for s in range(len(exact["hungarian"])):
    pipe = {"acc_tau": acc_tau[s], "kept_tau": kept_tau[s],
            "view_acc_high": {"crop": high_low[s][0]},
            "view_acc_low": {"crop": high_low[s][1]}}
    rl = {a: {"exact": exact[a][s], "greedy_below": below[s], "greedy_gap": 0.01}
          for a in cx.ARMS}
    runs.append({"pipeline": pipe, "rl": rl})
  return {"runs": runs}


def _curve(no_filter, at_tau, e2e):
  # accuracies at cx.TAUS = (0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, > 1)
  return [no_filter, no_filter, no_filter, no_filter, at_tau, at_tau, at_tau, e2e, e2e]


KEPT = [1.0, 1.0, 0.95, 0.9, 0.8, 0.5, 0.2, 0.1, 0.0]


def test_claims_on_hand_built_results():
  good = _result([_curve(0.80, 0.85, 0.6), _curve(0.82, 0.84, 0.62)], [KEPT, KEPT],
                 [(0.9, 0.7), (0.92, 0.75)],
                 {"hungarian": [0.6, 0.7], "greedy": [0.55, 0.7], "binary": [0.3, 0.4]})
  assert [c.held for c in cx.claims(good)] == [True] * 6
  # the pipeline loses to the end-to-end network in one seed; the filter hurts; confidence
  # does not rank the evidence; greedy beats Hungarian; binary beats greedy in one seed;
  # greedy never under-scores
  bad = _result([_curve(0.80, 0.78, 0.6), _curve(0.82, 0.70, 0.75)], [KEPT, KEPT],
                [(0.9, 0.7), (0.7, 0.75)],
                {"hungarian": [0.5, 0.6], "greedy": [0.55, 0.7], "binary": [0.3, 0.8]},
                below=(0.0, 0.1))
  assert [c.held for c in cx.claims(bad)] == [False] * 6
  # an idle filter (no mask below 0.7 in some seed) cannot test claim 2
  idle = [1.0] * 7 + [0.5, 0.0]
  held = [c.held for c in cx.claims(_result([_curve(0.8, 0.8, 0.6)] * 2, [idle, KEPT],
                                            [(0.9, 0.7)] * 2, {a: [0.5, 0.5] for a in cx.ARMS}))]
  assert held[1] is None
  assert cx.claims({"runs": []}) == []
