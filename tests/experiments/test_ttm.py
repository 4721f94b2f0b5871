"""The Test-Time Matching experiment end to end at its smallest setting.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the report rows.
"""

import json
import pathlib

from experiments import ttm as ttm_exp
from jaxlab.preference import ttm


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.ttm --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[ttm]`` runs that notebook's
  ``--smoke`` cell and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  assert {r["stage"] for r in saved["summary"]} == set(ttm_exp.STAGES)
  assert saved["figures"]
  for name in saved["figures"]:
    assert (out / pathlib.Path(name).name).stat().st_size > 0, name
  run = saved["runs"][0]
  assert len(run["rounds"]) == 2 and run["rounds"][0]["threshold"] == 1.0
  for stage in ttm_exp.STAGES:
    s = run[stage]
    assert s["group"] <= min(s["text"], s["image"]) + 1e-9  # group = text and image
    assert 0.0 <= s["group_match"] <= 1.0
  # The weak order signal: matching sees more than the group score does, and
  # fine-tuning on the true pairings fixes most groups.
  assert run["before"]["group_match"] > run["before"]["group"]
  assert run["oracle"]["group_match"] > 0.9
  # SimpleMatch fine-tunes on the pre-trained best matchings, so it ends near the pre-trained
  # GroupMatch; coin flips end well below it (a swapped pairing in either arm fails these)
  assert abs(run["simple"]["group_match"] - run["before"]["group_match"]) < 0.15
  assert run["random"]["group_match"] < run["before"]["group_match"] - 0.1
  assert f"{ttm.group_score_chance(2):.3f}" in (out / "summary.md").read_text()


def test_claims_are_decided_under_the_protocol():
  from experiments import protocol

  assert ttm_exp.CLAIMS[0].primary and "SimpleMatch" in ttm_exp.CLAIMS[0].claim
  def run(s, n):
    signal = n < 0.5
    return {"seed": s, "order_noise": n,
            "before": {"group": 0.15, "group_match": 0.9 if signal else 0.5},
            "after": {"group": (0.95 if signal else 0.5) + 0.003 * s, "group_match": 0.95},
            "simple": {"group": (0.9 if signal else 0.5) + 0.001 * s, "group_match": 0.9},
            "oracle": {"group": 1.0, "group_match": 1.0},
            "random": {"group": 0.5, "group_match": 0.5}}
  record = {"runs": [run(s, n) for n in (0.4, 0.45, 0.5) for s in range(5)],
            "provenance": {"git_dirty": False}}
  rows = ttm_exp.claims(record)
  assert rows == protocol.decide(ttm_exp.CLAIMS, record)
  # both claims were declared underpowered from the quick run: cannot tell, whatever D is
  assert [r.reason.split(" (")[0] for r in rows] == ["underpowered"] * 2
  assert rows[0].interval[1] > 0.02  # D = +0.05 (+0.002 per seed), [L, U] above δ
  # the same claims, powered, decide on the interval and their controls
  powered = [protocol.ClaimSpec(**{**c.__dict__, "underpowered": None})
             for c in ttm_exp.CLAIMS]
  assert [r.verdict for r in protocol.decide(powered, record)] == ["held", "held"]
  # without an order signal TTM must not beat SimpleMatch: if it does, nothing is decided
  for r in record["runs"]:
    if r["order_noise"] == 0.5:
      r["after"]["group"] += 0.1
  assert protocol.decide(powered, record)[0].reason.startswith(
      "negative control failed: no order signal")
