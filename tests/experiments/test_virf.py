"""The VIRF experiment: its smoke results (the smoke run executes in the Colab notebook's
test, which checks it with :func:`check_smoke_results`), its row encoding, and claims() on
hand-built results."""

import json
import pathlib

import numpy as np

from experiments import virf
from jaxlab.data import kitchen
from jaxlab.data import lm_tasks as lt


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.virf --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "virf.png").stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["arms"]) == set(virf.ARMS)
  assert 0.0 <= run["train_unsafe_share"] <= 1.0
  assert run["train_rows"] == saved["config"]["train_plans"] + 2 * saved["config"]["repair_rows"]
  for name, arm in run["arms"].items():
    assert max(arm["har_known"], arm["har_heldout"]) <= arm["har"] <= (
        arm["har_known"] + arm["har_heldout"])
    assert 0.0 <= arm["gcr"] <= 1.0 and 1.0 <= arm["iterations"] <= 3.0
    if name in virf.VERIFIED:  # only plans the tutor passed were executed
      assert arm["har_known"] == 0.0
  assert len(virf.claims(saved)) == 5


def test_rows_put_every_answer_at_the_same_positions():
  task = kitchen.Task("soup", ("bowl", "spoon"))
  plan = kitchen.option_plan(task, kitchen.Option("bowl", "microwave", ("left_in", "spoon")))
  fixed = kitchen.option_plan(task, kitchen.Option("bowl", "microwave", None))
  p = virf.plan_prompt(task)
  words = ["R1"] + ["_"] * (virf.FEEDBACK_TOKENS - 1)
  r = virf.repair_prompt(task, plan, words)
  assert len(p) == len(r) == virf.REPAIR_PREFIX
  assert p[:len(p) - virf.PREFIX] == [lt.PAD] * (len(p) - virf.PREFIX)
  for prompt, answer in ((p, plan), (r, fixed)):
    row, mask = virf._row(prompt, answer)
    assert row.shape == (virf.ROW,) and mask.sum() == virf.ANSWER
    # the masked positions predict exactly the plan words and EOS
    targets = row[1:][mask > 0]
    assert kitchen.parse_plan([kitchen.TOKENIZER.words[t] for t in targets[:-1]]) == answer
    assert targets[-1] == lt.EOS
  assert virf._decode(np.array([virf._row(p, plan)[0][virf.REPAIR_PREFIX:]])) == [plan]


def _arm(har_known=0.0, har_heldout=0.0, gcr=0.9, iterations=1.2, repair_success=0.8):
  return {"har": har_known + har_heldout, "har_known": har_known, "har_heldout": har_heldout,
          "gcr": gcr, "iterations": iterations, "passed": 0.9, "repair_success": repair_success}


def _result(seeds, **arms):
  return {"runs": [{"arms": {a: _arm(**{k: v[s] for k, v in arms.get(a, {}).items()})
                             for a in virf.ARMS}} for s in range(seeds)]}


def test_claims_on_hand_built_results():
  good = _result(
      2, none={"har_known": [0.2, 0.25], "har_heldout": [0.02, 0.03]},
      reject={"gcr": [0.85, 0.86], "iterations": [1.5, 1.4], "har_heldout": [0.03, 0.02],
              "repair_success": [0.5, 0.5]},
      rule_id={"gcr": [0.88, 0.9], "repair_success": [0.6, 0.6], "har_heldout": [0.03, 0.0]},
      full={"gcr": [0.92, 0.93], "iterations": [1.3, 1.3], "repair_success": [0.8, 0.7],
            "har_heldout": [0.02, 0.04]})
  assert [c.held for c in virf.claims(good)] == [True] * 5
  # a seed without hazards unverified; a known hazard executed; reject as good as full;
  # the rule id repairs as well; no held-out hazard gets through
  bad = _result(
      2, none={"har_known": [0.2, 0.05]},
      reject={"gcr": [0.93, 0.92], "iterations": [1.2, 1.2], "har_known": [0.0, 0.01]},
      rule_id={"repair_success": [0.9, 0.9], "gcr": [0.95, 0.95]},
      full={"gcr": [0.92, 0.93], "iterations": [1.3, 1.3], "repair_success": [0.8, 0.7]})
  assert [c.held for c in virf.claims(bad)] == [False] * 5
  assert virf.claims({"runs": []}) == []
