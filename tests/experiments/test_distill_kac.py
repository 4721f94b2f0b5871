"""The DistillKac experiment.

Its ``--smoke`` pipeline runs once per suite, in its Colab notebook
(``tests/colab/test_notebooks.py::test_notebook_runs[distill_kac]``), which then calls
:func:`check_smoke_results` on the output; the rest of this module tests claims() on
hand-built results."""

import json
import pathlib

import pytest

from experiments import distill_kac as dkx


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.distill_kac --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  for name in ("distill_kac_curves.png", "distill_kac_samples.png"):
    assert (out / name).stat().st_size > 0
  run, cfg = saved["runs"][0], saved["config"]
  stages = list(cfg["stages"])
  assert [p["nfe"] for p in run["teacher"]] == stages
  assert [p["nfe"] for p in run["students"]] == stages[1:]
  for p in run["teacher"] + run["students"] + [run["teacher_ab2"]]:
    assert 0.0 <= p["accuracy"] <= 1.0 and p["fd"] >= 0.0
  # the exact target's Kac velocity never exceeds c; one speed per teacher step
  assert run["target_speed_max"] <= dkx.C + 1e-5
  assert len(run["teacher_speed_per_step"]) == stages[0]
  assert len(run["distill_loss"]) == len(stages) - 1
  assert len(dkx.claims(saved)) == 3


def _result(student_fd, teacher_fd, fd100=(10.0, 10.0), acc=0.9, speed=(3.0, 3.5)) -> dict:
  runs = []
  for s in range(len(fd100)):
    runs.append({
        "teacher": [{"nfe": 100, "fd": fd100[s], "accuracy": 0.92}] + [
            {"nfe": m, "fd": teacher_fd[s], "accuracy": 0.8} for m in (20, 4, 2, 1)],
        "students": [{"nfe": m, "fd": student_fd[s], "accuracy": acc} for m in (20, 4, 2, 1)],
        "target_speed_max": speed[0], "teacher_speed_per_step": [1.0, speed[1]]})
  return {"runs": runs, "config": {}}


def test_claims_on_hand_built_results():
  good = _result(student_fd=(12.0, 13.0), teacher_fd=(40.0, 50.0))
  assert [c.held for c in dkx.claims(good)] == [True, True, True]
  # students no better than the teacher; 3x the 100-step FD; the learned speed above c + 1
  bad = _result(student_fd=(30.0, 30.0), teacher_fd=(40.0, 50.0), speed=(3.0, 4.5))
  assert [c.held for c in dkx.claims(bad)] == [False, False, False]
  # far better on average but not in one seed (32 > 0.5 * 40)
  mixed = _result(student_fd=(32.0, 2.0), teacher_fd=(40.0, 100.0))
  assert dkx.claims(mixed)[0].held is False
  # accuracy 0.15 below the 100-step teacher: not "a little worse"
  assert dkx.claims(_result((12.0, 13.0), (40.0, 50.0), acc=0.77))[1].held is False
  # the target beyond c fails the bound
  assert dkx.claims(_result((12.0, 13.0), (40.0, 50.0), speed=(3.1, 3.0)))[2].held is False
  assert dkx.claims({"runs": []}) == []


def test_stages_are_checked():
  assert dkx.check_stages([100, 20, 4, 2, 1]) == (100, 20, 4, 2, 1)
  for bad in ((100,), (100, 30), (4, 4), (4, 8), (2, 0)):
    with pytest.raises(ValueError, match="stages"):
      dkx.check_stages(bad)
