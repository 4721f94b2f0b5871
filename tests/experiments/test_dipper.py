"""The DIPPER experiment and the environment benchmark at their smallest settings."""

import json

import pytest

from experiments import bench_envs
from experiments import dipper as dipper_exp


def test_smoke_run(tmp_path, capsys):
  res = dipper_exp.main(["--smoke", "--out", str(tmp_path), "--tasks", "maze", "--arms", "flat",
                         "dipper", "--no-sweep"])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert [r["arm"] for r in saved["runs"]] == ["flat", "dipper"]
  assert (tmp_path / "success.png").stat().st_size > 0
  assert "| task | arm | lambda |" in capsys.readouterr().out
  for r in res["runs"]:
    assert 0.0 <= r["final"]["eval/success"]["mean"] <= 1.0
    assert 0.0 <= r["final"]["eval/subgoal_in_wall"]["mean"] <= 1.0
  assert "high/dpo_loss" in res["runs"][1]["final"]


def test_bad_arm():
  with pytest.raises(ValueError, match="arm"):
    dipper_exp.hrl_config("hac", "maze", dipper_exp.CONFIGS["smoke"])


def test_bench_envs_smallest(tmp_path):
  r = bench_envs.main(["--envs", "4", "--steps", "5", "--out", str(tmp_path)])
  assert set(r["steps_per_s"]) == {"PointRobot-misc", "PointMaze", "PointPush",
                                   "PointMaze (grid obs)"}
  assert all(v > 0 for v in r["steps_per_s"].values())
