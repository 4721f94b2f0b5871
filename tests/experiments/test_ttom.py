"""The TTOM experiment.

Its ``--smoke`` pipeline runs once per suite, in its Colab notebook
(``tests/colab/test_notebooks.py::test_notebook_runs[ttom]``), which then calls
:func:`check_smoke_results` on the output; the rest of this module tests claims() on
hand-built results."""

import json
import pathlib

from experiments import ttom as tx


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.ttom --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  for name in ("ttom_curves.png", "ttom_samples.png"):
    assert (out / name).stat().st_size > 0
  run, cfg = saved["runs"][0], saved["config"]
  assert set(run["arms"]) == set(tx.ARMS)
  assert len(run["probe"]["iou_opt_steps"]) == cfg["layers"]
  for arm, rec in run["arms"].items():
    assert 0.0 <= rec["box_accuracy"] <= 1.0 and rec["fd"] >= 0.0
    assert len(rec["per_prompt"]["iters"]) == cfg["prompts"]
    assert sum(rec["strategies"]) == cfg["prompts"]
    most = {"base": 0, "guidance": cfg["opt_steps"] * 3,
            "lora": cfg["opt_steps"] * cfg["iters"], "memory": cfg["opt_steps"] * cfg["iters"]}
    assert all(0 <= it <= most[arm] for it in rec["per_prompt"]["iters"])
  assert run["arms"]["base"]["iters_per_prompt"] == 0
  assert run["arms"]["guidance"]["iters_per_prompt"] == cfg["opt_steps"] * 3
  assert len(tx.claims(saved)) == 4


def _result(acc, iters=(40.0, 10.0), probe=0.2, seeds=2, guide_iou=0.2) -> dict:
  runs = []
  for s in range(seeds):
    arms = {a: {"box_accuracy": acc[a][s], "iou": {"lora": 0.3, "guidance": guide_iou}.get(a, 0.1),
                "iters_per_prompt": {"lora": iters[0], "memory": iters[1]}.get(a, 0.0)}
            for a in tx.ARMS}
    runs.append({"arms": arms, "probe": {"iou_opt_steps": [0.05, probe]}, "layer": 1})
  return {"runs": runs, "config": {}}


def test_claims_on_hand_built_results():
  acc = {"base": (0.1, 0.12), "guidance": (0.2, 0.2), "lora": (0.3, 0.25),
         "memory": (0.28, 0.24)}
  assert [c.held for c in tx.claims(_result(acc))] == [True, True, True, True]
  # no localisation; LoRA no better than base in one seed; guidance better; memory as slow
  bad = {"base": (0.1, 0.24), "guidance": (0.4, 0.4), "lora": (0.3, 0.25),
         "memory": (0.3, 0.25)}
  assert [c.held for c in tx.claims(_result(bad, iters=(40.0, 30.0), probe=0.05))] == [
      False, False, False, False]
  # memory halves the iterations but loses accuracy
  worse = dict(acc, memory=(0.2, 0.15))
  assert tx.claims(_result(worse))[3].held is False
  # LoRA's box accuracy above guidance's, its attention-box IoU below: not ">="
  assert tx.claims(_result(acc, guide_iou=0.5))[2].held is False
  assert tx.claims({"runs": []}) == []
