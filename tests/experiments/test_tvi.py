"""The TVI experiment: its smoke results (checked on the Colab notebook's run), and claims()
on hand-built results."""

import json
import pathlib

from experiments import tvi


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.tvi --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "tvi.png").exists()
  assert saved["config"]["layers"] == 1
  run = saved["runs"][0]
  L = run["num_layers"]
  assert len(run["profile_vt"]) == len(run["profile_t"]) == L + 1
  assert 0 <= run["vip"] <= L + 1 and 1 <= run["vip_used"] <= L
  assert set(run["arms"]) == {"0", "0.03"}
  for m in (run["base"], *run["arms"].values()):
    assert set(m["acc"]) == {"conflict", "consistent", "copy"}
    assert all(0.0 <= a <= 1.0 for a in m["acc"].values())
    # on the conflict set an answer cannot be both the label and the hint
    assert m["acc"]["conflict"] + m["hint_follow"] <= 1.0 + 1e-9
  assert len(tvi.claims(saved)) == 4


def _result(follow, vip, after, before, reg, plain, layers=4):
  runs = [{"num_layers": layers, "vip": v, "vip_auto": v,
           "base": {"hint_follow": f, "acc": {"conflict": 0.1, "consistent": 0.9},
                    "rho_after": a, "rho_before": b},
           "arms": {"0": {"acc": {"conflict": p}}, "0.03": {"acc": {"conflict": r}}}}
          for f, v, a, b, r, p in zip(follow, vip, after, before, reg, plain, strict=True)]
  return {"runs": runs, "config": {"tau": 0.05, "lams": [0.0, 0.03]}}


def test_claims_on_hand_built_results():
  good = _result([0.8, 0.7], [3, 2], [0.3, 0.2], [0.05, float("nan")], [0.3, 0.25], [0.2, 0.2])
  assert [c.held for c in tvi.claims(good)] == [True, True, True, True]
  # hint at chance in one seed; no VIP (L + 1) in one seed; rho after negative in one seed;
  # the regulariser loses in one seed
  bad = _result([0.8, 0.12], [3, 5], [0.3, -0.1], [0.0, 0.0], [0.3, 0.15], [0.2, 0.2])
  assert [c.held for c in tvi.claims(bad)] == [False, False, False, False]
  # rho after positive but weaker than the before-VIP correlation
  weak = _result([0.8, 0.7], [3, 2], [0.1, 0.1], [0.3, -0.3], [0.3, 0.25], [0.2, 0.2])
  assert tvi.claims(weak)[2].held is False
  assert tvi.claims({"runs": [], "config": {}}) == []
