"""The greedy-agents experiment: its smoke results (checked on the Colab notebook's run),
and claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import greedy


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.greedy --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "greedy.png").exists()
  assert saved["config"]["num_arms"] == 3
  run = saved["runs"][0]
  assert set(run["policies"]) == set(greedy.ROWS)
  h, k = saved["config"]["horizon"], saved["config"]["num_arms"]
  for m in run["policies"].values():
    assert len(m["regret_curve"]) == h and len(m["freq_share"]) == saved["config"][
        "max_repeats"] + 1
    assert 0.0 <= m["regret"] <= h and 1 / k <= m["coverage"] <= 1.0
    assert np.all(np.diff(m["regret_curve"]) >= -1e-6)  # cumulative
  # UCB tries every arm in its first K steps; random picks the repeated arm 1/K of the time
  assert run["policies"]["ucb"]["coverage_curve"][k - 1] == 1.0
  assert np.allclose(run["policies"]["random"]["freq_share"], 1 / k)
  assert "rationale_correct" in run["policies"]["bc"]
  assert "rationale_correct" not in run["policies"]["no_rationale"]
  assert set(run["rl_curves"]) == set(greedy.RL_SETS)
  assert len(run["rl_curves"]["rlft"]["regret"]) == saved["config"]["rl_iters"]
  assert len(greedy.claims(saved)) == 8


def _policy(regret, coverage, ar=0.1, ag=0.6, rc=0.6, share=0.9):
  return {"regret": regret, "coverage": coverage, "act_rationale_given_correct": ar,
          "act_greedy_given_correct": ag, "rationale_correct": rc, "freq_share": [0.5, share]}


def _result(bc, rlft, ucb, no_bonus, seeds=2):
  runs = [{"policies": {"bc": bc[s], "rlft": rlft[s], "ucb": ucb[s], "no_bonus": no_bonus[s]}}
          for s in range(seeds)]
  return {"runs": runs, "config": {"num_arms": 5, "max_repeats": 1}}


def test_claims_on_hand_built_results():
  bc = [_policy(15.0, 0.7), _policy(16.0, 0.72)]
  rlft = [_policy(10.0, 0.9, ar=0.5, share=0.5), _policy(11.0, 0.85, ar=0.6, share=0.6, rc=0.57)]
  ucb = [_policy(5.0, 1.0, share=0.0)] * 2
  no_bonus = [_policy(11.0, 0.8)] * 2
  assert [c.held for c in greedy.claims(_result(bc, rlft, ucb, no_bonus))] == [True] * 8
  # no built-in gap (acts on its rationale), regret up in one seed, coverage down, the agent
  # beats UCB, the bonus lowers coverage, the rationale loses 0.1 in one seed
  bc_bad = [_policy(15.0, 1.0, ar=0.9, ag=0.1), _policy(10.0, 1.0, ar=0.9, ag=0.1)]
  rlft_bad = [_policy(10.0, 0.9, ar=0.5, share=0.95),
              _policy(11.0, 0.85, ar=0.5, share=0.95, rc=0.5)]  # rationale drifts in seed 2
  held = [c.held for c in greedy.claims(_result(bc_bad, rlft_bad, [_policy(12.0, 1.0)] * 2,
                                                [_policy(11.0, 0.95)] * 2))]
  assert held == [False] * 8
  assert greedy.claims({"runs": [], "config": {}}) == []
