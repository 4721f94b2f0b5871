"""The DIPPER experiment and the environment benchmark at their smallest settings."""

import json
import pathlib

import pytest

from experiments import bench_envs
from experiments import dipper as dipper_exp
from experiments.common import Ratio, check_claims

RESULTS = pathlib.Path(__file__).parents[2] / "docs" / "results"


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


def test_claims_on_recorded_run():
  rows = dipper_exp.claims(json.loads((RESULTS / "dipper" / "quick" / "results.json").read_text()))
  assert check_claims(rows)
  for r in rows:
    assert isinstance(r.claim, str) and r.claim and isinstance(r.measured, str) and r.measured
    assert r.held is None or isinstance(r.held, bool)
  # The README (--quick): on push DIPPER's subgoals are closer and of higher low-level Q
  # than HIER's, but no success gain; the value term barely moves anything at lambda 1;
  # a large lambda reduces subgoals in walls but makes them longer, not trivial.
  assert [r.held for r in rows] == [True, False, False, False]


def test_claims_on_recorded_full_run():
  result = json.loads((RESULTS / "dipper" / "full" / "results.json").read_text())
  rows = check_claims(dipper_exp.claims(result))
  # The README (full run, 5 seeds): on push DIPPER's subgoals are farther from where the low
  # level ends and of lower Q than HIER's; its success beats HIER's in 4 of 5 seeds only;
  # the value term changes nothing on either task; lambda 100 puts subgoals into walls.
  assert [r.held for r in rows] == [False, False, False, False]
  assert "dipper higher in 4/5" in rows[1].measured
  reused = {r["lam"]: r["reused_from"] for r in result["runs"] if r.get("reused_from")}
  assert reused == {0.0: "dipper_no_v", 1.0: "dipper"}


def test_claims_without_runs():
  rows = dipper_exp.claims({"scale": "smoke", "runs": []})
  assert len(rows) == 4 and all(r.held is None and r.measured for r in rows)


def test_ratios_on_recorded_bench():
  result = json.loads((RESULTS / "dipper" / "bench" / "results.json").read_text())
  rows = bench_envs.ratios(result)
  assert all(isinstance(r, Ratio) and r.name and r.note for r in rows)
  got = {r.name.split(" steps/s")[0]: r.ratio for r in rows}
  assert got == pytest.approx({k: v for k, v in result["ratio_to_point_robot"].items()
                               if k != bench_envs.ANCHOR})
  assert got["PointMaze"] >= 0.5 and got["PointPush"] >= 0.3  # the README's targets met


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
