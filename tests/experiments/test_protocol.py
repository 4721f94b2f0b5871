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
    (-0.3, 0.5, "inconclusive", "the interval spans 0 or stops short of δ"),  # mean 0.1 < δ/2
    (0.05, 0.4, "held", "L > 0 and U ≥ δ"),  # U = δ counts
])
def test_superiority_rule(lo, hi, verdict, reason):
  assert P.rule(iv(lo, hi), 0.4, "superiority") == (verdict, reason)


@pytest.mark.parametrize("lo, hi, verdict", [
    (-0.3, 0.2, "held"),  # L > -δ
    (-0.5, -0.45, "refuted"),  # U < -δ
    (-0.5, 0.1, "inconclusive"),
    (-0.4, 0.1, "inconclusive"),  # L = -δ is not above it
    (-0.5, -0.1, "inconclusive"),  # worse, but not ruled worse than -δ
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
  assert P.decide([declared], ok)[0].reason == (
      "underpowered (needs n ≈ 40 seeds); controls and guards pass")
  assert P.decide([declared], no_oracle)[0].reason.startswith(
      "underpowered (needs n ≈ 40 seeds); positive control failed: oracle")


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
  with pytest.raises(ValueError, match="Guard"):
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


def test_rule_rejects_bad_margins_and_intervals():
  with pytest.raises(ValueError, match="margin"):
    P.rule(iv(0.1, 0.5), 0.0, "superiority")
  with pytest.raises(ValueError, match="interval"):
    P.rule(Interval(np.nan, np.nan, np.nan, 5, "x"), 0.4, "superiority")
  assert P.rule(iv(0.1, 0.5), np.float32(0.4), "superiority")[0] == "held"
  with pytest.raises(ValueError, match="margin"):
    P.Control("c", SPEC.compare, True)


def test_inconclusive_positive_control_cannot_tell():
  before = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
  gain = np.array([0.10, 0.12, 0.08, 0.11, 0.09])
  # the oracle's gain spans 0 and the margin: not shown, so the test bed cannot tell
  noisy = record(before + gain, before, before + np.array([.3, -.2, .25, -.15, .05]),
                 before)
  d = P.decide([SPEC], noisy)[0]
  assert d.verdict == "cannot tell" and d.reason.startswith("positive control failed")


def test_second_guard_and_floor_boundary():
  spec = P.ClaimSpec(**{**SPEC.__dict__, "guards": (
      SPEC.guards[0], P.Guard("oracle below ceiling", P.Arm("runs.*.oracle"), ceiling=0.95))})
  before = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
  gain = np.array([0.10, 0.12, 0.08, 0.11, 0.09])
  rec = record(before + gain, before, np.full(5, 0.96), before)
  d = P.decide([spec], rec)[0]
  assert d.verdict == "cannot tell" and "oracle below ceiling" in d.reason
  exact = P.Guard("before", BEFORE, floor=0.25, distance=0.25)  # floor + distance = 0.5
  assert "at the floor" in exact.check(record([.6] * 5, [.5] * 5, [.9] * 5, [.5] * 5))
  assert exact.check(record([.6] * 5, [.5001] * 5, [.9] * 5, [.5] * 5)) is None
  top = P.Guard("before", BEFORE, ceiling=1.0, distance=0.25)  # ceiling - distance = 0.75
  assert "at the ceiling" in top.check(record([.9] * 5, [.75] * 5, [.9] * 5, [.5] * 5))


def test_a_nan_seed_cannot_tell():
  before = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
  after = before + np.array([0.10, np.nan, 0.08, 0.11, 0.09])
  d = P.decide([SPEC], record(after, before, before + 0.3, before))[0]
  assert d.verdict == "cannot tell" and "not all finite" in d.measured


def test_unknown_provenance_cannot_tell():
  before = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
  rec = record(before + 0.1, before, before + 0.3, before)
  del rec["provenance"]
  assert P.decide([SPEC], rec)[0].reason == "record without provenance (git state unknown)"


ITEM = P.ClaimSpec(
    claim="decoder matches", metric="nll", kind="superiority", unit="item", margin=0.05,
    primary=True,
    compare=P.Comparison(P.Arm("runs.*.new.*"), P.Arm("runs.*.old.*")),
    positive=P.Control("oracle", P.Comparison(P.Arm("runs.*.oracle.*"), P.Arm("runs.*.old.*")),
                       0.05),
    negative=P.Control("blank", P.Comparison(P.Arm("runs.*.blank.*"), P.Arm("runs.*.old.*")),
                       0.05, "negative"),
    guards=(P.Guard("old", P.Arm("runs.*.old.*"), floor=0.0, ceiling=10.0),))


def item_record(sizes, rng):
  runs = []
  for s, n in enumerate(sizes):
    old = rng.uniform(1, 2, n)
    shift = 0.2 if s == 0 else -0.1  # strata with different effects: stratification matters
    runs.append({"seed": s, "old": old.tolist(), "new": (old + shift + rng.normal(0, .05, n)
                                                          ).tolist(),
                 "oracle": (old + 0.5).tolist(), "blank": old.tolist()})
  return {"runs": runs, "provenance": {"git_dirty": False}}


def test_item_claims_bootstrap_within_strata():
  from jaxlab.core.stats import bootstrap_interval

  rng = np.random.default_rng(0)
  rec = item_record([150, 150], rng)
  d = P.decide([ITEM], rec)[0]
  diffs, strata = ITEM.compare.diffs(rec)
  want = bootstrap_interval(diffs, strata, 0.95, P.RESAMPLES, seed=0)
  assert d.interval == (want.mean, want.lo, want.hi, 300)
  assert "paired bootstrap, 300 items in 2 strata" in d.measured
  # within strata the effect is +0.05 ± 0.003: held at δ = 0.05, ruled smaller than δ = 0.06
  # (pooled, the strata's +0.2 and -0.1 would widen it to about ± 0.017 and reach 0.06)
  assert d.verdict == "held"
  wider = P.ClaimSpec(**{**ITEM.__dict__, "margin": 0.06})
  assert P.decide([wider], rec)[0].text == "refuted (smaller than δ)"
  few = P.decide([ITEM], item_record([100, 99], rng))[0]
  assert few.verdict == "cannot tell" and few.reason.startswith("underpowered (199 items < 200")


def test_unit_must_match_the_arms():
  with pytest.raises(ValueError, match="unit 'item'"):
    P.ClaimSpec(**{**SPEC.__dict__, "unit": "item"})
  with pytest.raises(ValueError, match="unit 'seed'"):
    P.ClaimSpec(**{**ITEM.__dict__, "unit": "seed"})


def test_bad_arms_and_values_are_named():
  with pytest.raises(TypeError, match="where"):
    P.Arm("runs.*.x", where=["noise"])
  with pytest.raises(TypeError, match="a and b must be Arm"):
    P.Comparison("runs.*.x", BEFORE)
  with pytest.raises(TypeError, match="higher_is_better"):
    P.Comparison(BEFORE, BEFORE, higher_is_better="False")
  with pytest.raises(ValueError, match="floor"):
    P.Guard("g", BEFORE, floor=0.9, ceiling=0.1)
  with pytest.raises(ValueError, match="arm 'runs.\\*.x': values must be numbers"):
    P.Arm("runs.*.x").get({"runs": [{"x": "0.5"}]})
  with pytest.raises(KeyError, match="no key 'y'"):
    P.Arm("runs.*.y").put({"runs": [{"x": 1.0}]}, [2.0])
