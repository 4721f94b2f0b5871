"""The FAC experiment and benchmark end to end at their smallest settings."""

import json

import numpy as np
import pytest

from experiments import bench_flow_actor_critic, flow_actor_critic


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
