"""The FAC experiment and benchmark end to end at their smallest settings.

The experiment's ``--smoke`` run executes in the Colab notebook's test, which checks it
with :func:`check_smoke_results`; the rest of this module tests the arms, the benchmark
and the report rows.
"""

import json
import pathlib

import numpy as np
import pytest

from experiments import bench_flow_actor_critic, flow_actor_critic
from experiments.reporting import Ratio, check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.flow_actor_critic --smoke --arms penalty_only fql`` must
  have written under ``out``: the FAC code path with its penalty, and the FQL one.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[flow_actor_critic]`` runs that
  notebook's tiny cell, with these arguments, and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  assert [r["arm"] for r in saved["runs"]] == ["penalty_only", "fql"]
  assert (out / "q_values.png").stat().st_size > 0
  assert (out / "success.png").stat().st_size > 0
  assert "| task | arm |" in (out / "summary.md").read_text()
  for run in saved["runs"]:
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
  with pytest.raises(ValueError, match="rounds"):
    bench_flow_actor_critic.main(["--rounds", "0"])
  with pytest.raises(ValueError, match="profile-steps"):
    bench_flow_actor_critic.main(["--profile-steps", "-1"])
  with pytest.raises(ValueError, match="arm"):
    flow_actor_critic.arm_setup("bc", flow_actor_critic.CONFIGS["smoke"])


def test_bench_runs_both_paths(tmp_path):
  r = bench_flow_actor_critic.main(["--seeds", "1", "--steps", "3", "--hidden", "8",
                                    "--batch-size", "8", "--rounds", "2", "--profile-steps", "3",
                                    "--out", str(tmp_path)])
  assert r["scan_seed_steps_per_s"] > 0 and r["loop_seed_steps_per_s"] > 0
  assert len(r["scan_s_rounds"]) == len(r["ratio_rounds"]) == 2
  assert r["ratio_spread"] == [min(r["ratio_rounds"]), max(r["ratio_rounds"])]
  assert r["scan_s"] == np.median(r["scan_s_rounds"])
  share = r["profile"]["share"]  # every part of a FAC step is found in the trace
  assert {"density", "distillation", "sampling", "critic+actor+Adam"} <= set(share)
  assert "unattributed" not in share and abs(sum(share.values()) - 1) < 1e-9
  assert np.isclose(r["ratio"], r["scan_seed_steps_per_s"] / r["loop_seed_steps_per_s"])


def _run(arm, **per_seed):
  """A results.json run row with hand-set per-seed finals ("/" in keys written as "__")."""
  final = {k.replace("__", "/"): {"mean": float(np.mean(v)), "std": 0.0, "per_seed": v}
           for k, v in per_seed.items()}
  return {"task": "multigoal_point", "arm": arm, "final": final}


def _synthetic(q_mean_seed1=0.5, fac_frac_seed0=0.1, fac_success_seed2=0.6):
  """Three seeds of the three arms the claims compare; the defaults make every claim hold."""
  return {"scale": "quick", "runs": [
      _run("no_penalty", critic__q_pi_mean=[0.3, q_mean_seed1, 2.0],
           critic__q_pi_max=[5.0, 6.0, 7.0], critic__q_pi_pos_frac=[0.6, 0.7, 0.8],
           eval__success=[0.1, 0.2, 0.1]),
      _run("fac", critic__q_pi_mean=[-5.0] * 3, critic__q_pi_max=[-1.0] * 3,
           critic__q_pi_pos_frac=[fac_frac_seed0, 0.0, 0.0],
           eval__success=[0.5, 0.6, fac_success_seed2]),
      _run("fql", eval__success=[0.4, 0.5, 0.5]),
  ]}


def test_claims_on_synthetic_runs():
  """Each criterion on hand-set per-seed numbers: all hold, then each fails on its own."""
  rows = check_claims(flow_actor_critic.claims(_synthetic()))
  assert [r.held for r in rows] == [True, True, True, True]
  assert "mean > 0 in 3/3" in rows[0].measured
  # Q(s, pi) below 0 in one seed without the penalty: no explosion "in every seed".
  rows = flow_actor_critic.claims(_synthetic(q_mean_seed1=-0.5))
  assert [r.held for r in rows] == [False, True, True, True]
  assert "mean > 0 in 2/3" in rows[0].measured
  # FAC with more Q > 0 than no_penalty in seed 0; FAC below FQL (not no_penalty) in seed 2.
  assert [r.held for r in flow_actor_critic.claims(_synthetic(fac_frac_seed0=0.65))] == [
      True, False, True, True]
  assert [r.held for r in flow_actor_critic.claims(_synthetic(fac_success_seed2=0.45))] == [
      True, True, True, False]


def test_claims_without_arms():
  rows = flow_actor_critic.claims({"scale": "smoke", "runs": []})
  assert len(rows) == 4 and all(r.held is None and r.measured for r in rows)


def test_ratio_on_a_synthetic_bench():
  result = {"scan_seed_steps_per_s": 300.0, "loop_seed_steps_per_s": 200.0, "hidden": [8],
            "seeds": 1, "steps": 3, "batch_size": 8, "backend": "cpu"}
  rows = bench_flow_actor_critic.ratios(result)
  assert len(rows) == 1 and isinstance(rows[0], Ratio) and rows[0].name and rows[0].note
  assert rows[0].ratio == 1.5 and rows[0].higher_is_better
  rounds = {**result, "rounds": 3, "ratio": 1.5, "ratio_rounds": [1.3, 1.4, 1.6],
            "ratio_spread": [1.3, 1.6]}
  row = bench_flow_actor_critic.ratios(rounds)[0]
  assert row.ratio == 1.5 and "3 rounds (per-round ratios 1.30-1.60)" in row.note


def test_the_experiment_states_its_own_discount():
  # FACConfig's default is the official 0.995; the recorded runs use 0.99 in every arm
  for arm in flow_actor_critic.ARMS:
    cfg = flow_actor_critic.arm_setup(arm, flow_actor_critic.CONFIGS["smoke"])[1]
    assert cfg.discount == flow_actor_critic.DISCOUNT == 0.99
