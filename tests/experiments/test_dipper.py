"""The DIPPER experiment and the environment benchmark at their smallest settings."""

import json

import numpy as np
import pytest

from experiments import bench_envs
from experiments import dipper as dipper_exp
from experiments.reporting import Ratio, check_claims


def check_smoke_results(out) -> None:
  """What the Colab notebook's tiny run (``--smoke --tasks maze --arms flat dipper
  --no-sweep``) must have written under ``out``; that run executes once per suite, in
  ``tests/colab/test_notebooks.py::test_notebook_runs[dipper]``, which calls this."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["config"]["iterations"] == dipper_exp.CONFIGS["smoke"]["iterations"]
  assert [r["arm"] for r in saved["runs"]] == ["flat", "dipper"]
  assert (out / "success.png").stat().st_size > 0
  assert "| task | arm | lambda |" in (out / "summary.md").read_text()
  for r in saved["runs"]:
    assert 0.0 <= r["final"]["eval/success"]["mean"] <= 1.0
    assert 0.0 <= r["final"]["eval/subgoal_in_wall"]["mean"] <= 1.0
  assert "high/dpo_loss" in saved["runs"][1]["final"]


def test_diagnose_eval_smoke(tmp_path):
  # --diagnose-eval at the smoke scale, at one lambda (--lam 0: training is one compiled
  # program for every lambda, and which lambdas run is test_diagnose_eval_lambdas's):
  # every high-level choice x low-level determinism, rates in [0, 1], the policy's stats
  dipper_exp.main(["--smoke", "--diagnose-eval", "--lam", "0", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert list(saved["diagnosis"]) == ["0"]
  assert "--diagnose-eval" in saved["provenance"]["command"]
  d = saved["diagnosis"]["0"]
  assert len(d["grid"]) == 2 * len(dipper_exp.DIAG_HIGH)
  for m in d["grid"].values():
    assert len(m["success"]) == 2 and all(0.0 <= v <= 1.0 for v in m["success"])
  assert all(v > 0 for v in d["policy"]["std"])
  assert all(0.0 <= v < 0.5 for v in d["policy"]["mean_subgoal_spread"])
  assert len(d["recorded"]["eval/success"]) == 2


def test_diagnose_eval_lambdas(tmp_path, monkeypatch):
  """--diagnose-eval trains at lambda 0 and the scale's lam (once where they are equal), in
  that order, and keys each one's diagnosis by the lambda."""
  calls = []

  def fake_diagnose_one(cfg, lam, episodes):
    calls.append((cfg["iterations"], lam))
    cell = {"success": [lam, lam], "subgoal_in_wall": [0.0, 0.0], "subgoal_step": [0.1, 0.1]}
    return {"grid": {"high mean, low det": cell}, "policy": {"std": [1.0, 1.0]},
            "recorded": {"eval/success": [0.0, 0.0]}}

  monkeypatch.setattr(dipper_exp, "_diagnose_one", fake_diagnose_one)
  smoke = dipper_exp.CONFIGS["smoke"]
  for lam, want in (([], [0.0, smoke["lam"]]), (["--lam", "0"], [0.0]),
                    (["--lam", "2.5"], [0.0, 2.5])):
    calls.clear()
    dipper_exp.main(["--smoke", "--diagnose-eval", "--out", str(tmp_path), *lam])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert calls == [(smoke["iterations"], v) for v in want]
    assert list(saved["diagnosis"]) == [f"{v:g}" for v in want]
    for v in want:
      assert saved["diagnosis"][f"{v:g}"]["grid"]["high mean, low det"]["success"] == [v, v]


def test_bad_arm():
  with pytest.raises(ValueError, match="arm"):
    dipper_exp.hrl_config("hac", "maze", dipper_exp.CONFIGS["smoke"])


def test_bench_envs_smallest(tmp_path):
  r = bench_envs.main(["--envs", "4", "--steps", "5", "--out", str(tmp_path)])
  assert set(r["steps_per_s"]) == {"PointRobot-misc", "PointMaze", "PointPush",
                                   "PointMaze (grid obs)"}
  assert all(v > 0 for v in r["steps_per_s"].values())


def _run(task, arm, lam=1.0, sweep=False, **per_seed):
  """A results.json run row with hand-set per-seed finals (keys without the eval/ prefix)."""
  final = {f"eval/{k}": {"mean": float(np.mean(v)), "std": 0.0, "per_seed": v}
           for k, v in per_seed.items()}
  return {"task": task, "arm": arm, "lam": lam, "sweep": sweep, "final": final}


def _synthetic(dipper_success_seed2=0.5, no_v_seed0=0.2, dipper_dist_seed1=0.1,
               big_lambda_step=0.1):
  """Three seeds on push plus a maze lambda sweep; the defaults make every claim hold."""
  return {"scale": "quick", "runs": [
      _run("push", "flat", success=[0.0, 0.1, 0.2]),
      _run("push", "hier", success=[0.1, 0.2, 0.3], subgoal_distance=[0.2, 0.3, 0.2],
           lower_q=[-2.0, -2.0, -2.0]),
      _run("push", "dipper_no_v", lam=0.0, success=[no_v_seed0, 0.3, 0.2]),
      _run("push", "dipper", success=[0.3, 0.4, dipper_success_seed2],
           subgoal_distance=[0.1, dipper_dist_seed1, 0.1], lower_q=[-1.0, -1.0, -1.0]),
      _run("maze", "dipper", lam=0.1, sweep=True, success=[0.5] * 3, subgoal_in_wall=[0.5] * 3,
           subgoal_step=[0.4] * 3),
      _run("maze", "dipper", lam=100.0, sweep=True, success=[0.5] * 3,
           subgoal_in_wall=[0.1] * 3, subgoal_step=[big_lambda_step] * 3),
  ]}


def test_claims_on_synthetic_runs():
  """Each criterion on hand-set per-seed numbers: all hold, then each fails on its own."""
  rows = check_claims(dipper_exp.claims(_synthetic()))
  assert [r.held for r in rows] == [True, True, True, True]
  assert "dipper higher in 3/3" in rows[1].measured
  # DIPPER below HIER in seed 2 (0.25 < 0.3): no longer better in every seed.
  rows = dipper_exp.claims(_synthetic(dipper_success_seed2=0.25))
  assert [r.held for r in rows] == [True, False, True, True]
  assert "dipper higher in 2/3" in rows[1].measured
  # Subgoals farther than HIER's in seed 1; no-V beating DIPPER in seed 0; a large lambda
  # with longer steps (not trivial subgoals).
  assert dipper_exp.claims(_synthetic(dipper_dist_seed1=0.5))[0].held is False
  assert dipper_exp.claims(_synthetic(no_v_seed0=0.31))[2].held is False
  assert dipper_exp.claims(_synthetic(big_lambda_step=0.6))[3].held is False


def test_claims_without_runs():
  rows = dipper_exp.claims({"scale": "smoke", "runs": []})
  assert len(rows) == 4 and all(r.held is None and r.measured for r in rows)


def test_ratios_on_a_synthetic_bench():
  result = {"envs": 4, "steps": 5, "backend": "cpu",
            "steps_per_s": {bench_envs.ANCHOR: 200.0, "PointMaze": 100.0, "PointPush": 300.0}}
  rows = bench_envs.ratios(result)
  assert all(isinstance(r, Ratio) and r.name and r.note for r in rows)
  assert {r.name.split(" steps/s")[0]: r.ratio for r in rows} == {"PointMaze": 0.5,
                                                                   "PointPush": 1.5}


def test_sweep_reuses_main_arm_runs(tmp_path, monkeypatch):
  """A swept lambda equal to a main arm's (0 = no V, 1 = DIPPER) is not trained twice."""
  calls = []

  def fake_run(task, arm, config, seeds, ckpt):
    calls.append((task, arm, config.dipper.lam))
    hist = {"env_steps": [[1, 1], [2, 2]], "eval/success": [[0.1, 0.2], [0.3, 0.4]]}
    final = {k: {"mean": 0.5, "std": 0.1, "per_seed": [0.4, 0.6]}
             for k in ("eval/success", "train/success", "eval/subgoal_in_wall",
                       "eval/subgoal_step")}
    return {"task": task, "arm": arm, "lam": config.dipper.lam, "history": hist,
            "final": final, "wall_time_s": 1.0}

  monkeypatch.setattr(dipper_exp, "run", fake_run)
  monkeypatch.setitem(dipper_exp.CONFIGS, "smoke",
                      dict(dipper_exp.CONFIGS["smoke"], lams=(0.0, 1.0, 10.0)))
  res = dipper_exp.main(["--smoke", "--out", str(tmp_path), "--tasks", "maze", "--arms",
                         "dipper_no_v", "dipper"])
  assert calls == [("maze", "dipper_no_v", 0.0), ("maze", "dipper", 1.0), ("maze", "dipper", 10.0)]
  sweep = [r for r in res["runs"] if r["sweep"]]
  assert [(r["arm"], r["lam"], r.get("reused_from")) for r in sweep] == [
      ("dipper", 0.0, "dipper_no_v"), ("dipper", 1.0, "dipper"), ("dipper", 10.0, None)]
  assert [r["sweep"] for r in res["runs"][:2]] == [False, False]  # main rows stay main rows
  # --report-only rebuilds the summary from results.json without training anything.
  (tmp_path / "summary.md").unlink()
  again = dipper_exp.main(["--report-only", "--out", str(tmp_path)])
  assert len(calls) == 3 and again["wall_time_s"] == res["wall_time_s"]
  summary = (tmp_path / "summary.md").read_text()
  assert "| train success |" in summary and summary.count("| maze | dipper |") == 4
