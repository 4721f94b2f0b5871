"""The verdict protocol's rule, controls, guards and arms, on hand-built records."""

import numpy as np
import pytest

from experiments import protocol as P
from jaxlab.core.stats import Interval


def iv(lo, hi):
  return Interval((lo + hi) / 2, lo, hi, 5, "hand")


@pytest.mark.parametrize("lo, hi, verdict, reason", [
    (0.1, 0.5, "held", "L > 0 and U ≥ δ"),
    (0.1, 0.3, "refuted", "smaller than δ"),  # clears 0 but rules δ out
    (-0.5, -0.1, "refuted", "reversed"),
    (-0.1, 0.5, "inconclusive", "the interval spans 0 or stops short of δ"),
    (0.0, 0.5, "inconclusive", "the interval spans 0 or stops short of δ"),  # L > 0 is strict
    (0.05, 0.4, "held", "L > 0 and U ≥ δ"),  # U = δ counts
])
def test_superiority_rule(lo, hi, verdict, reason):
  assert P.rule(iv(lo, hi), 0.4, "superiority") == (verdict, reason)


@pytest.mark.parametrize("lo, hi, verdict", [
    (-0.3, 0.2, "held"),  # L > -δ
    (-0.5, -0.45, "refuted"),  # U < -δ
    (-0.5, 0.1, "inconclusive"),
    (-0.4, 0.1, "inconclusive"),  # L = -δ is not above it
])
def test_non_inferiority_rule(lo, hi, verdict):
  assert P.rule(iv(lo, hi), 0.4, "non-inferiority")[0] == verdict


def record(after, before, oracle, shuffled, seeds=None):
  seeds = range(len(after)) if seeds is None else seeds
  return {"runs": [{"seed": s, "after": a, "before": b, "oracle": o, "shuffled": z}
                   for s, a, b, o, z in zip(seeds, after, before, oracle, shuffled, strict=True)],
          "provenance": {"git_dirty": False}}


BEFORE = Arm = P.Arm("runs.*.before")
SPEC = P.ClaimSpec(
    claim="training raises accuracy", metric="accuracy",
    compare=P.Comparison(P.Arm("runs.*.after"), BEFORE), margin=0.05, primary=True,
    positive=P.Control("oracle", P.Comparison(P.Arm("runs.*.oracle"), BEFORE), 0.05),
    negative=P.Control("shuffled", P.Comparison(P.Arm("runs.*.shuffled"), BEFORE), 0.05,
                       "negative"),
    guards=(P.Guard("accuracy before", BEFORE, floor=0.1, ceiling=1.0, distance=0.05),))


def test_decide_by_hand():
  before = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
  after = before + np.array([0.10, 0.12, 0.08, 0.11, 0.09])
  rec = record(after, before, before + 0.3, before + np.array([.01, -.01, 0, .02, -.02]))
  d = P.decide([SPEC], rec)[0]
  # D = 0.1 ± t_{.975,4} * sd([.10,.12,.08,.11,.09]) / sqrt(5) = 0.1 ± 2.776 * 0.0158 / 2.236
  assert d.verdict == "held" and d.primary
  np.testing.assert_allclose(d.interval[:3], [0.1, 0.1 - 0.019632, 0.1 + 0.019632], atol=1e-5)
  assert "D = +0.1 [+0.0804, +0.12]" in d.measured and "5 seeds" in d.measured


def test_lower_is_better_flips_the_difference():
  spec = P.ClaimSpec(**{**SPEC.__dict__, "compare": P.Comparison(
      P.Arm("runs.*.after"), BEFORE, higher_is_better=False)})
  before = np.full(5, 0.5)
  rec = record(before - np.array([.10, .12, .08, .11, .09]), before, before + 0.3,
               before + np.array([.01, -.01, 0, .02, -.02]))
  assert P.decide([spec], rec)[0].verdict == "held"


def test_controls_guards_and_units_give_cannot_tell():
  before = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
  gain = np.array([0.10, 0.12, 0.08, 0.11, 0.09])
  ok = record(before + gain, before, before + 0.3, before + gain[::-1] - 0.1)
  assert P.decide([SPEC], ok)[0].verdict == "held"
  no_oracle = record(before + gain, before, before, before)
  d = P.decide([SPEC], no_oracle)[0]
  assert d.verdict == "cannot tell" and d.reason.startswith("positive control failed: oracle")
  leaky = record(before + gain, before, before + 0.3, before + gain)
  d = P.decide([SPEC], leaky)[0]
  assert d.verdict == "cannot tell" and "negative control failed: shuffled" in d.reason
  ceiling = record(np.ones(5), np.full(5, 0.97), np.ones(5), np.full(5, 0.97))
  assert "at the ceiling" in P.decide([SPEC], ceiling)[0].reason
  floor = record(np.full(5, 0.3), np.full(5, 0.12), np.full(5, 0.5), np.full(5, 0.12))
  assert "at the floor" in P.decide([SPEC], floor)[0].reason  # within distance 0.05 of 0.1
  three = record(before[:3] + gain[:3], before[:3], before[:3] + .3, before[:3])
  d = P.decide([SPEC], three)[0]
  assert d.verdict == "cannot tell" and d.reason.startswith("underpowered (3 seeds < 5")
  dirty = {**ok, "provenance": {"git_dirty": True}}
  assert P.decide([SPEC], dirty)[0].reason == "record made from a dirty tree"
  declared = P.ClaimSpec(**{**SPEC.__dict__, "underpowered": "needs n ≈ 40 seeds"})
  assert P.decide([declared], ok)[0].reason == "underpowered (needs n ≈ 40 seeds)"


def test_arm_get_put_with_filter_and_items():
  rec = {"runs": [{"seed": 0, "noise": 0.4, "items": [1.0, 2.0]},
                  {"seed": 0, "noise": 0.45, "items": [3.0, 4.0, 5.0]},
                  {"seed": 1, "noise": 0.45, "items": [6.0]}]}
  arm = P.Arm("runs.*.items.*", where={"noise": 0.45})
  values, strata, seeds = arm.get(rec)
  assert values.tolist() == [3, 4, 5, 6] and strata.tolist() == [1, 1, 1, 2]
  assert seeds == [0, 0, 0, 1]
  new = arm.put(rec, [7, 8, 9, 10])
  assert new["runs"][1]["items"] == [7, 8, 9] and new["runs"][2]["items"] == [10]
  assert rec["runs"][1]["items"] == [3.0, 4.0, 5.0]  # a copy
  assert new["runs"][0]["items"] == [1.0, 2.0]  # filtered out, untouched
  with pytest.raises(ValueError, match="3 values for 4 units"):
    arm.put(rec, [1, 2, 3])


def test_paired_arms_must_list_the_same_seeds():
  rec = {"runs": [{"seed": 0, "arm": "a", "x": 1.0}, {"seed": 1, "arm": "a", "x": 2.0},
                  {"seed": 1, "arm": "b", "x": 1.0}, {"seed": 0, "arm": "b", "x": 1.5}]}
  a, b = P.Arm("runs.*.x", where={"arm": "a"}), P.Arm("runs.*.x", where={"arm": "b"})
  with pytest.raises(ValueError, match="different seeds"):
    P.paired(a, b, rec)


def test_replicate_gives_fresh_seeds():
  rec = record([.6, .7, .8], [.5, .5, .5], [.9] * 3, [.5] * 3)
  big = P.replicate(rec, [SPEC], 5)
  assert [r["seed"] for r in big["runs"]] == [0, 1, 2, 3, 4, 5]
  assert [r["after"] for r in big["runs"]] == [.6, .7, .8] * 2


def test_specs_reject_bad_declarations():
  with pytest.raises(ValueError, match="margin"):
    P.ClaimSpec(**{**SPEC.__dict__, "margin": 0})
  with pytest.raises(ValueError, match="kind"):
    P.ClaimSpec(**{**SPEC.__dict__, "kind": "better"})
  with pytest.raises(ValueError, match="guard"):
    P.ClaimSpec(**{**SPEC.__dict__, "guards": ()})
  with pytest.raises(ValueError, match="positive"):
    P.ClaimSpec(**{**SPEC.__dict__, "positive": SPEC.negative})
  with pytest.raises(ValueError, match="path"):
    P.Arm("runs.after")
  with pytest.raises(ValueError, match="primary"):
    P.decide([P.ClaimSpec(**{**SPEC.__dict__, "primary": False})], {})


def test_under_repair_keeps_the_old_rule_as_text():
  from experiments.reporting import Claim

  rows = P.under_repair([Claim("a beats b", "0.5 vs 0.4", True),
                         Claim("c", "n/a", None)], 44)
  assert [r.verdict for r in rows] == ["cannot tell"] * 2
  assert rows[0].primary and not rows[1].primary
  assert rows[0].reason == "test bed under repair, issue 44; the script's old rule: held"
  assert P.counts(rows) == {"held": 0, "refuted": 0, "inconclusive": 0, "cannot tell": 2}
