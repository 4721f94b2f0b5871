"""The Cascadia experiment: its smoke results (the smoke run executes in the Colab notebook's
test, which checks it with :func:`check_smoke_results`), the FLOPs count, and claims() on
hand-built results."""

import json
import pathlib

import numpy as np

from experiments import cascadia
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.cascadia --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "cascadia.png").stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["arms"]) == set(cascadia.ARMS)
  n = saved["config"]["workers"]
  # FLOPs grow with the models; the service times are proportional to them
  assert run["flops"] == sorted(run["flops"])
  assert run["flops"] == [cascadia.mlp_flops(64, h, 10) for h in saved["config"]["hidden"]]
  np.testing.assert_allclose(np.array(run["service_ms"]) / run["service_ms"][-1],
                             np.array(run["flops"]) / run["flops"][-1])
  assert run["z1"] > run["z2"] and run["z2"] < run["q_min"] < run["z1"]
  for arm in run["arms"].values():
    if arm["workers"] is not None:
      assert sum(arm["workers"]) == n
    assert arm["max_rate"] >= 0
    if arm["at_floor"] is not None:  # a stable arm at the floor: L finite, quality >= q_min
      assert arm["quality"] >= run["q_min"] - 1e-12 and arm["e2e_p95"] > 0
      for f, d, t, w in zip(arm["workers"], arm["replicas"], arm["tp"], arm["workload"],
                            strict=True):
        assert d * t <= f and (w == 0 or d >= 1)
  assert run["arms"]["largest"]["workers"] == [0] * (len(run["flops"]) - 1) + [n]
  assert run["arms"]["uniform"]["thresholds"] == run["arms"]["cascadia"]["thresholds"]
  # the MILP is optimal for its thresholds: uniform, with the same thresholds, is no better
  ours, uniform = run["arms"]["cascadia"]["latency"], run["arms"]["uniform"]["latency"]
  assert uniform is None or (ours is not None and ours <= uniform + 1e-9)  # None: unstable
  assert len(check_claims(cascadia.claims(saved))) == 3


def test_mlp_flops_by_hand():
  # 64 -> 16 -> 10: 2 * 64 * 16 + 16 + 2 * 16 * 10 + 10
  assert cascadia.mlp_flops(64, [16], 10) == 2048 + 16 + 320 + 10
  assert cascadia.mlp_flops(4, [], 2) == 2 * 4 * 2 + 2


def _result(latency: dict, rate: dict, e2e: dict | None = None) -> dict:
  seeds = len(latency["cascadia"])
  e2e = e2e or latency
  return {"runs": [{"arms": {a: {"at_floor": latency[a][s], "max_rate": rate[a][s],
                                 "e2e_p95": e2e[a][s]} for a in cascadia.ARMS}}
                   for s in range(seeds)]}


def test_claims_on_hand_built_results():
  good = _result({"cascadia": [5.0, 6.0], "largest": [20.0, 20.0], "uniform": [9.0, 6.0],
                  "routing": [7.0, 6.5]},
                 {"cascadia": [10.0, 9.0], "largest": [0.7, 0.7], "uniform": [3.0, 9.0],
                  "routing": [9.5, 8.0]})
  assert [c.held for c in cascadia.claims(good)] == [True, True, True]
  # routing lower in one seed; uniform meets the SLO at a higher rate on average;
  # a baseline under the quality floor (None: inf) never beats Cascadia
  bad = _result({"cascadia": [5.0, 6.0], "largest": [None, 20.0], "uniform": [9.0, 6.0],
                 "routing": [4.0, 8.0]},
                {"cascadia": [10.0, 9.0], "largest": [0.7, 0.7], "uniform": [12.0, 8.0],
                 "routing": [9.5, 8.0]},
                {"cascadia": [5.0, 6.0], "largest": [20.0, 20.0], "uniform": [1.0, 1.0],
                 "routing": [7.0, 6.5]})
  assert [c.held for c in cascadia.claims(bad)] == [False, False, False]
  assert "inf in 1/2 seeds" in cascadia.claims(bad)[0].measured
  assert cascadia.claims({"runs": []}) == []
