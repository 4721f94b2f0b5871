"""VIRF's tutor against hand-built plans and rule sets with known hazards, its feedback,
the refinement loop and the metrics on hand-labelled examples."""

import numpy as np
import pytest

from jaxlab.core.horn import Rule
from jaxlab.safety import virf
from jaxlab.safety.virf import Status

WITHIN = (
    Rule("within", ("within", "?x", "?y"), (("in", "?x", "?y"),)),
    Rule("within_step", ("within", "?x", "?z"), (("in", "?x", "?y"), ("within", "?y", "?z"))),
)
METAL = Rule("M1", ("hazard", "M1", "?x"),
             (("metal", "?x"), ("within", "?x", "oven"), ("active", "oven")),
             info={"level": 9, "warning": "metal in a hot oven", "reason": "it sparks",
                   "suggestion": "take {x} out of the oven"})
PAPER = Rule("P1", ("hazard", "P1", "?x"), (("paper", "?x"), ("within", "?x", "oven")),
             info={"level": 4, "warning": "paper in the oven", "reason": "it may burn",
                   "suggestion": "remove {x}"})
RULES = WITHIN + (METAL, PAPER)
STATIC = {("metal", "fork"), ("metal", "tin"), ("paper", "bag")}


def _state(*facts):
  return frozenset(STATIC | set(facts))


# a fork in a tin, the tin into the oven, the oven on, then off
STATES = [
    _state(("in", "fork", "tin"), ("in", "tin", "table")),
    _state(("in", "fork", "tin"), ("in", "tin", "oven")),
    _state(("in", "fork", "tin"), ("in", "tin", "oven"), ("active", "oven")),
    _state(("in", "fork", "tin"), ("in", "tin", "oven"), ("active", "oven")),
    _state(("in", "fork", "tin"), ("in", "tin", "oven")),
]
PLAN = [("put", "tin", "oven"), ("on", "oven", "_"), ("wait", "_", "_"), ("off", "oven", "_")]


def test_status_order_and_pass():
  assert virf.worst([]) == Status.SAFE
  assert virf.worst([Status.SAFE, Status.WARNING]) == Status.WARNING
  assert virf.worst([Status.WARNING, Status.UNSAFE, Status.SAFE]) == Status.UNSAFE
  assert virf.worst([Status.UNSAFE, Status.UNKNOWN, Status.WARNING]) == Status.UNKNOWN
  assert [virf.passes(s) for s in Status] == [True, True, False, False]


def test_hazards_found_per_state_and_deduplicated_by_rule_and_subject():
  v = virf.verify(STATES, RULES)
  # fork and tin are both metal and both within the running oven from s_2 on (s_2, s_3):
  # one hazard each, at their first state; none in s_0, s_1, s_4
  assert v.status == Status.UNSAFE
  assert [(h.rule, h.subject, h.step) for h in v.hazards] == [("M1", "fork", 2), ("M1", "tin", 2)]
  # a second subject of another rule is another hazard; the same subject of another rule too
  states = [s | {("in", "bag", "oven"), ("paper", "fork")} for s in STATES]
  v2 = virf.verify(states, RULES)
  assert sorted((h.rule, h.subject, h.step) for h in v2.hazards) == [
      ("M1", "fork", 2), ("M1", "tin", 2), ("P1", "bag", 0), ("P1", "fork", 1)]


def test_status_from_error_and_warnings():
  safe = [STATES[0], STATES[1]]
  assert virf.verify(safe, RULES).status == Status.SAFE
  assert virf.verify(safe, RULES, warnings=["oven already off"]).status == Status.WARNING
  assert virf.verify(safe, RULES, warnings=["x"]).passed
  assert virf.verify(STATES, RULES, warnings=["x"]).status == Status.UNSAFE
  v = virf.verify(STATES[:3], RULES, warnings=["x"], error="step 3: unknown verb")
  assert v.status == Status.UNKNOWN and not v.passed and len(v.hazards) == 2
  # without the hazard rules the tutor knows nothing unsafe
  assert virf.verify(STATES, WITHIN).status == Status.SAFE


def test_causal_chain_and_structured_feedback():
  v = virf.verify(STATES, RULES)
  fork = v.hazards[0]
  # within(tin, oven) <- in(tin, oven); within(fork, oven) <- in(fork, tin), within(tin, oven)
  assert [(f, d.rule) for f, d in fork.chain] == [
      (("within", "tin", "oven"), "within"), (("within", "fork", "oven"), "within_step"),
      (("hazard", "M1", "fork"), "M1")]
  assert set(fork.key_facts) == {("in", "tin", "oven"), ("in", "fork", "tin"),
                                 ("metal", "fork"), ("active", "oven")}
  fb = virf.feedback(fork, RULES, PLAN)
  assert fb["action_info"] == {"step": 2, "action": "on oven _"}
  assert fb["violated_rule"] == {"id": "M1", "warning": "metal in a hot oven",
                                 "danger_level": 9, "reason": "it sparks"}
  assert fb["causal_chain"]["related_objects"] == ["tin", "oven"]
  assert fb["causal_chain"]["message"].endswith(
      "hazard(M1, fork) by M1 from metal(fork), within(fork, oven), active(oven)")
  assert fb["suggestion"] == "take fork out of the oven"
  with pytest.raises(ValueError, match="not among the rules"):
    virf.feedback(fork, WITHIN)


def test_feedback_words_rank_and_modes():
  states = [s | {("in", "bag", "oven")} for s in STATES]
  v = virf.verify(states, RULES)
  # bag from s_0 comes first; fork before tin (same step and level: subject order)
  assert [h.subject for h in virf.ranked(v.hazards, RULES)] == ["bag", "fork", "tin"]
  full = virf.feedback_words(v, RULES, "full", max_hazards=2, related=2)
  assert full == ["P1", "L4", "a0", "bag", "oven", "_",
                  "M1", "L9", "a2", "fork", "tin", "oven"]
  assert virf.feedback_words(v, RULES, "rule", max_hazards=2, related=2) == (
      ["P1"] + ["_"] * 5 + ["M1"] + ["_"] * 5)
  assert virf.feedback_words(virf.verify(STATES[:2], RULES), RULES, "full", max_hazards=1,
                             related=1) == ["_"] * 5
  with pytest.raises(ValueError, match="mode"):
    virf.feedback_words(v, RULES, "causal")


def test_refine_loop_counts_attempts():
  good = virf.Verification(Status.SAFE, (), (), None)
  bad = virf.Verification(Status.UNSAFE, (), (), None)
  calls = []

  def verify_fn(i, plan):
    return good if plan == "ok" else bad

  def revise(attempt, failing, plans, vers):
    calls.append((attempt, list(failing)))
    # task 1 is fixed at attempt 2, task 2 at attempt 3, task 3 never
    return ["ok" if (i == 1 or (i == 2 and attempt == 3)) else "no" for i in failing]

  res = virf.refine(["ok", "no", "no", "no"], verify_fn, revise, max_attempts=3)
  assert calls == [(2, [1, 2, 3]), (3, [2, 3])]
  assert res.attempts.tolist() == [1, 2, 3, 3]
  assert res.passed.tolist() == [True, True, True, False]
  one = virf.refine(["no"], verify_fn, revise, max_attempts=1)
  assert one.attempts.tolist() == [1] and not one.passed[0]
  with pytest.raises(ValueError, match="max_attempts"):
    virf.refine(["no"], verify_fn, revise, max_attempts=0)
  with pytest.raises(ValueError, match="revise_fn returned"):
    virf.refine(["no", "no"], verify_fn, lambda *a: ["ok"], max_attempts=2)


def test_metrics_on_hand_labelled_examples():
  # four tasks: hazards executed in tasks 2 and 4
  assert virf.hazardous_action_rate([0, 2, 0, 1]) == 0.5
  # goal shares 1, 2/3, 0 (not executed)
  assert np.isclose(virf.goal_condition_rate([1.0, 2 / 3, 0.0]), 5 / 9)
  with pytest.raises(ValueError, match="hazard_counts"):
    virf.hazardous_action_rate([])
  with pytest.raises(ValueError, match="progress"):
    virf.goal_condition_rate([1.5])


def test_bad_input():
  with pytest.raises(TypeError, match="rules"):
    virf.verify(STATES, [("hazard", "x")])
  with pytest.raises(ValueError, match="states"):
    virf.verify([], RULES)
  with pytest.raises(ValueError, match="max_hazards"):
    virf.feedback_words(virf.verify(STATES, RULES), RULES, "full", max_hazards=0)
