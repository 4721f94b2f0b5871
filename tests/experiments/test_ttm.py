"""The Test-Time Matching experiment end to end at its smallest setting.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the report rows.
"""

import json
import pathlib

from experiments import ttm as ttm_exp
from experiments.reporting import check_claims
from jaxlab.preference import ttm


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.ttm --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[ttm]`` runs that notebook's
  ``--smoke`` cell and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  assert {r["stage"] for r in saved["summary"]} == {"before", "after", "oracle"}
  assert saved["figures"]
  for name in saved["figures"]:
    assert (out / pathlib.Path(name).name).stat().st_size > 0, name
  run = saved["runs"][0]
  assert len(run["rounds"]) == 2 and run["rounds"][0]["threshold"] == 1.0
  for stage in ("before", "after", "oracle"):
    s = run[stage]
    assert s["group"] <= min(s["text"], s["image"]) + 1e-9  # group = text and image
    assert 0.0 <= s["group_match"] <= 1.0
  # The weak order signal: matching sees more than the group score does, and
  # fine-tuning on the true pairings fixes most groups.
  assert run["before"]["group_match"] > run["before"]["group"]
  assert run["oracle"]["group_match"] > 0.9
  assert f"{ttm.group_score_chance(2):.3f}" in (out / "summary.md").read_text()


def _synthetic(group_before=0.2, match_after_seed1=0.8):
  """Two seeds at order noise 0.4 (k = 2: chance 1/6 for the group score, 1/2 GroupMatch)."""
  runs = [{"seed": s, "order_noise": 0.4,
           "before": {"group": group_before, "group_match": 0.7},
           "after": {"group": 0.75, "group_match": match_after_seed1 if s else 0.8}}
          for s in range(2)]
  return {"runs": runs}


def test_claims_on_synthetic_runs():
  rows = ttm_exp.claims(_synthetic())
  assert len(rows) == 3  # GroupMatch reveals, group score up, GroupMatch up per order noise
  check_claims(rows)
  assert [row.held for row in rows] == [True, True, True]
  assert "0.4" in rows[2].claim and "up in 2/2 seeds" in rows[2].measured
  # Group score 0.7 before: its margin over chance (0.53) exceeds GroupMatch's (0.2); and
  # GroupMatch falls in seed 1.
  rows = ttm_exp.claims(_synthetic(group_before=0.7, match_after_seed1=0.65))
  assert [row.held for row in rows] == [False, True, False]
  assert ttm_exp.claims({"runs": []}) == []
