"""The matching diagnosis end to end at its smallest setting, and its candidate rule."""

import json
from unittest import mock

import numpy as np
import pytest

from experiments import matching_diagnosis as D
from jaxlab import matching as M
from jaxlab.data.matching_instances import make


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  out = tmp_path_factory.mktemp("matching_diagnosis")
  return out, D.main(["--smoke", "--out", str(out)])


def test_smoke_run_traces_and_splits_the_excess(smoke):
  out, result = smoke
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and "provenance" in saved
  assert [tuple(r["setting"]) for r in saved["grid"]] == [D.PAPER, (0.4, 0.001, 5)]
  assert "trace" not in saved["grid"][0] and len(saved["grid"][0]["ratio_curve"]) == 5
  # stage 2: the paper's setting and the one grid candidate at big_n
  assert [tuple(s) for s in saved["big_settings"]] == [D.PAPER, (0.4, 0.001, 5)]
  assert [r["family"] for r in saved["trace"]] == ["uniform", "clustered"]
  for run in saved["big"] + saved["trace"]:
    n, trace = run["n"], run["trace"]
    assert [c["k"] for c in trace] == list(range(n // 10, n + 1, n // 10))
    for c in trace:
      excess = c["cost"] - c["opt"]
      assert excess >= -1e-6 * c["opt"]  # the exact prefix matching is optimal
      # the splits by level and by arrival decile each sum to the total excess
      np.testing.assert_allclose(sum(c["level_excess"]), excess, atol=1e-6 * c["opt"])
      np.testing.assert_allclose(sum(c["decile_excess"]), excess, atol=1e-6 * c["opt"])
      np.testing.assert_allclose(sum(c["level_cost"]), c["cost"], rtol=1e-9)
      assert sum(c["level_count"]) == c["k"]
      assert c["unit"] == pytest.approx(run["setting"][0] * c["omega"] / (2 * n))
      assert c["y0_max"] <= c["y0_reach"] * (1 + 1e-6)  # a level-0 dual stays below y_max(0)
      comp = c["components"]
      # every alternating path or cycle of M xor M* holds a non-negative excess (M* optimal)
      assert comp["min_excess"] >= -1e-6 * c["opt"]
      if excess > 1e-6 * c["opt"]:
        assert sum(comp["size_excess_share"]) == pytest.approx(1.0)
        assert comp["top1_share"] <= comp["top10_share"] <= 1 + 1e-9
        assert 1 <= comp["top1_size"] <= comp["largest_size"] <= round(c["differ"] * c["k"])
    assert np.all(np.diff([c["restarts"] for c in trace]) >= 0)
    assert len(D.doublings(run)) == trace[-1]["restarts"]
    assert run["final"] == trace[-1]
  # the exact run's final cost is the optimum of the whole instance (scipy)
  run = saved["trace"][1]
  servers, requests, metric = make(run["family"], run["n"], run["seed"])
  assert run["final"]["opt"] == pytest.approx(M.optimal_cost(requests, servers, metric),
                                              rel=1e-5)
  # the uniform trace of the paper's setting is the stage-2 run (same instance), reused
  assert saved["trace"][0]["trace"] == saved["big"][0]["trace"]
  for name in ("trace_ratio", "trace_duals", "settings", "excess_vs_unit"):
    assert (out / f"{name}.png").stat().st_size > 0
  text = (out / "summary.md").read_text()
  assert "| family | n | seed |" in text and "(paper)" in text
  assert result["trace_summary"][0]["level_excess_share"][0] == pytest.approx(
      saved["trace"][0]["final"]["level_excess"][0]
      / (saved["trace"][0]["final"]["cost"] - saved["trace"][0]["final"]["opt"]))


def test_rerun_resumes_from_the_runs(smoke):
  out, result = smoke
  with mock.patch.object(D, "traced_run", side_effect=AssertionError("recomputed")) as run:
    again = D.main(["--smoke", "--out", str(out)])
  run.assert_not_called()
  assert [r["final"] for r in again["trace"]] == [r["final"] for r in result["trace"]]


def test_components_of_the_symmetric_difference():
  # M = (0, 1, 2, 5, 4), M* = (1, 0, 3, 5, 6): requests 0 and 1 swap (a cycle), request 2's
  # optimal server 3 is free in M (a path of one request), request 3 is on M*, and
  # request 4's optimal server 6 is free in M (a second path)
  server_of, best = np.array([0, 1, 2, 5, 4]), np.array([1, 0, 3, 5, 6])
  excess = np.array([0.5, -0.2, 0.4, 0.0, 0.1])  # the cycle holds 0.3
  comp = D.components(server_of, best, excess, 7, level=np.array([0, 0, 1, 0, 0]))
  assert comp["count"] == 3 and comp["largest_size"] == 2
  assert comp["top1_share"] == pytest.approx(0.4 / 0.8) and comp["top1_size"] == 1
  assert comp["size_excess_share"][:2] == pytest.approx([0.5 / 0.8, 0.3 / 0.8])
  assert comp["upper_share"] == pytest.approx(0.4 / 0.8)  # request 2 is at level 1
  assert comp["min_excess"] == pytest.approx(0.1)


def test_candidates_rank_by_ratio_within_the_steps_budget():
  def run(setting, ratio, steps, cost=None):
    return {"family": "uniform", "n": 10, "seed": 0, "setting": list(setting),
            "final": {"ratio": ratio, "steps": steps, "cost": ratio if cost is None else cost}}

  fast, slow, worse = (0.4, 0.001, 5), (0.05, 0.001, 5), (0.8, 0.001, 5)
  runs = [run(D.PAPER, 1.02, 1.0), run(fast, 1.01, 1.5), run(slow, 1.001, 9.0),
          run(worse, 1.05, 0.5)]
  assert D.candidates(runs, 1, 10.0) == [slow]  # the best, within the budget
  assert D.candidates(runs, 1, 2.0) == [fast]  # the slow one is over the budget
  assert D.candidates(runs, 2, 2.0) == [fast, worse]
  # a setting ending in the same matching as one already chosen is skipped
  twin = (0.8, 0.1, 5)
  runs.append(run(twin, 1.01, 1.5, cost=1.01))
  assert D.candidates(runs, 2, 2.0) == [fast, worse]
  assert D.candidates(runs + [run((0.3, 0.001, 5), 1.02, 1.0, cost=1.02)], 3, 2.0) == [
      fast, worse]  # the paper's own matching too
