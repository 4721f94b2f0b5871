"""The FAC experiment and benchmark end to end at their smallest settings."""

import json
import pathlib

import numpy as np
import pytest

from experiments import bench_flow_actor_critic, flow_actor_critic
from experiments.common import Ratio, check_claims

RESULTS = pathlib.Path(__file__).parents[2] / "docs" / "results"


def test_smoke_run(tmp_path, capsys):
  arms = ["penalty_only", "fql"]  # the FAC code path with its penalty, and the FQL one
  res = flow_actor_critic.main(["--smoke", "--out", str(tmp_path), "--arms", *arms])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert [r["arm"] for r in saved["runs"]] == arms
  assert (tmp_path / "q_values.png").stat().st_size > 0
  assert (tmp_path / "success.png").stat().st_size > 0
  assert "| task | arm |" in capsys.readouterr().out
  for run in res["runs"]:
    final = run["final"]
    assert 0.0 <= final["eval/success"]["mean"] <= 1.0
    assert 0.0 <= final["critic/q_pi_pos_frac"]["mean"] <= 1.0
    assert len(final["eval/success"]["per_seed"]) == 2
    assert ("penalty/w_mean" in final) == (run["arm"] in ("penalty_only", "fac"))


def test_arms_configure_the_ablation():
  cfg = flow_actor_critic.CONFIGS["smoke"]
  configs = {arm: flow_actor_critic.arm_setup(arm, cfg)[1] for arm in flow_actor_critic.ARMS}
  assert (configs["no_penalty"].alpha, configs["no_penalty"].distill) == (0.0, 0.0)
  assert configs["no_penalty"].pretrain_steps == 0  # nothing uses the flow
  assert (configs["penalty_only"].alpha, configs["penalty_only"].distill) == (1.0, 0.0)
  assert (configs["fac"].alpha, configs["fac"].distill) == (1.0, 1.0)
  assert type(configs["fql"]).__name__ == "FQLConfig"


def test_bad_arguments():
  with pytest.raises(ValueError, match="seeds"):
    flow_actor_critic.main(["--smoke", "--seeds", "0"])
  with pytest.raises(ValueError, match="arm"):
    flow_actor_critic.arm_setup("bc", flow_actor_critic.CONFIGS["smoke"])


def test_bench_runs_both_paths(tmp_path):
  r = bench_flow_actor_critic.main(["--seeds", "1", "--steps", "3", "--hidden", "8",
                                    "--batch-size", "8", "--out", str(tmp_path)])
  assert r["scan_seed_steps_per_s"] > 0 and r["loop_seed_steps_per_s"] > 0
  assert np.isclose(r["ratio"], r["scan_seed_steps_per_s"] / r["loop_seed_steps_per_s"])


@pytest.mark.parametrize("name", ["flow_actor_critic/quick", "flow_actor_critic/full"])
def test_claims_on_recorded_runs(name):
  rows = flow_actor_critic.claims(json.loads((RESULTS / name / "results.json").read_text()))
  assert check_claims(rows)
  for r in rows:
    assert isinstance(r.claim, str) and r.claim and isinstance(r.measured, str) and r.measured
    assert r.held is None or isinstance(r.held, bool)
  # The README: no Q explosion (it plateaus below 0), FAC has fewer Q > 0 and far more
  # success than the unconstrained arm, and does not beat FQL on success.
  assert [r.held for r in rows] == [False, True, True, False]


def test_claims_without_arms():
  rows = flow_actor_critic.claims({"scale": "smoke", "runs": []})
  assert len(rows) == 4 and all(r.held is None and r.measured for r in rows)


def test_ratios_on_recorded_bench():
  result = json.loads((RESULTS / "flow_actor_critic" / "bench" / "results.json").read_text())
  rows = bench_flow_actor_critic.ratios(result)
  assert len(rows) == 1 and isinstance(rows[0], Ratio) and rows[0].name and rows[0].note
  assert isinstance(rows[0].ratio, float) and np.isclose(rows[0].ratio, result["ratio"])
