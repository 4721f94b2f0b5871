"""The Test-Time Matching experiment end to end at its smallest setting."""

import json

import pytest

from experiments import ttm as ttm_exp
from experiments.common import check_claims
from jaxlab.preference import ttm


def test_smoke_run(tmp_path, capsys):
  res = ttm_exp.main(["--smoke", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert {r["stage"] for r in saved["summary"]} == {"before", "after", "oracle"}
  for name in res["figures"]:
    assert (tmp_path / name).stat().st_size > 0
  run = res["runs"][0]
  assert len(run["rounds"]) == 2 and run["rounds"][0]["threshold"] == 1.0
  for stage in ("before", "after", "oracle"):
    s = run[stage]
    assert s["group"] <= min(s["text"], s["image"]) + 1e-9  # group = text and image
    assert 0.0 <= s["group_match"] <= 1.0
  # The weak order signal: matching sees more than the group score does, and
  # fine-tuning on the true pairings fixes most groups.
  assert run["before"]["group_match"] > run["before"]["group"]
  assert run["oracle"]["group_match"] > 0.9
  assert f"{ttm.group_score_chance(2):.3f}" in capsys.readouterr().out


@pytest.mark.parametrize("name, gm_up",
                         [("ttm/quick", [False, False]), ("ttm/full", [True, False])])
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
