"""The symbolic kitchen: simulation on hand-built plans, the fast support facts against the
reasoner's closure, hazard labels, goal conditions, the training plans and their repairs."""

import numpy as np
import pytest

from jaxlab.core import horn
from jaxlab.data import kitchen as K

SOUP = K.Task("soup", ("bowl", "pot", "spoon", "towel", "knife"))


def _plan(task, container, heater, extra=None):
  return K.option_plan(task, K.Option(container, heater, extra))


def test_simulation_of_a_hand_built_plan():
  plan = _plan(SOUP, "bowl", "microwave")
  assert plan == [("put", "soup", "bowl"), ("put", "bowl", "microwave"),
                  ("on", "microwave", "_"), ("off", "microwave", "_"), ("put", "bowl", "table")]
  sim = K.simulate(SOUP, plan)
  assert sim.error is None and sim.warnings == () and len(sim.states) == 6
  s = sim.states
  assert ("in", "soup", "counter") in s[0] and ("in", "soup", "bowl") in s[1]
  assert ("heated", "soup") not in s[2] and ("heated", "soup") in s[3]  # heated once on
  assert ("active", "microwave") in s[3] and ("active", "microwave") not in s[4]
  assert ("heated", "soup") in s[5]  # the effect persists
  assert K.goal_progress(SOUP, s[5]) == 1.0
  # left running, never served: heated only
  assert K.goal_progress(SOUP, s[3]) == pytest.approx(1 / 3)
  assert K.goal_progress(SOUP, s[0]) == pytest.approx(1 / 3)  # only: every heater off


def test_simulation_warnings_and_errors():
  sim = K.simulate(SOUP, [("off", "stove", "_"), ("put", "soup", "counter")])
  assert sim.error is None and sim.warnings == ("step 1: stove is already off",
                                                "step 2: soup is already in counter")
  for plan, msg in [([("put", "bowl", "bowl")], "into 'bowl'"),
                    ([("put", "bowl", "pot"), ("put", "pot", "bowl")], "pot into bowl: bowl is"),
                    ([("put", "soup", "spoon")], "not a container"),
                    ([("put", "fork", "bowl")], "not a movable object"),
                    ([("stir", "soup", "pot")], "unknown verb"),
                    ([("on", "bowl", "_")], "not a heater")]:
    sim = K.simulate(SOUP, plan)
    assert msg in sim.error
    assert len(sim.states) == len(plan)  # the states before the failing action


def test_support_facts_equal_the_reasoners_closure():
  rng = np.random.default_rng(0)
  for _ in range(20):
    task = K.sample_task(rng)
    plan, _ = K.sample_plan(rng, task, 0.5)
    for state in K.simulate(task, plan).states:
      closure = horn.forward_chain(state, K.SUPPORT_RULES).facts
      assert K.support_facts(state) == closure
      assert list(K.true_hazards(state)) == K.hazards(state, K.world_rules())


def test_hand_labelled_hazards():
  def rules_hit(task, plan):
    return sorted({r for r, _ in K.plan_hazards(task, plan)})

  assert rules_hit(SOUP, _plan(SOUP, "bowl", "microwave")) == []
  assert rules_hit(SOUP, _plan(SOUP, "pot", "microwave")) == ["R1"]
  assert rules_hit(SOUP, _plan(SOUP, "bowl", "stove")) == []  # ceramic on the stove: no rule
  assert rules_hit(SOUP, _plan(SOUP, "bowl", "microwave", ("left_in", "spoon"))) == ["R1"]
  assert rules_hit(SOUP, _plan(SOUP, "pot", "stove", ("left_in", "spoon"))) == []
  assert rules_hit(SOUP, _plan(SOUP, "pot", "stove", ("clutter", "towel"))) == ["R4"]
  assert rules_hit(SOUP, _plan(SOUP, "pot", "stove", ("sink", "knife"))) == ["R8"]
  assert rules_hit(SOUP, _plan(SOUP, "pot", "stove", ("tidy", "knife"))) == []
  egg = K.Task("egg", ("bowl", "box"))
  assert rules_hit(egg, _plan(egg, "bowl", "microwave")) == ["H2"]
  assert rules_hit(egg, _plan(egg, "box", "microwave")) == ["H1", "H2"]
  assert rules_hit(egg, _plan(egg, "box", "stove")) == ["R5"]
  bread = K.Task("bread", ("fork",))
  assert rules_hit(bread, _plan(bread, None, "stove")) == ["R3"]
  assert rules_hit(bread, _plan(bread, None, "toaster", ("left_in", "fork"))) == ["R2"]
  # the tutor does not know the held-out rules
  assert {r.name for r in K.tutor_rules()} == {r.name for r in K.world_rules()} - {"H1", "H2"}
  with pytest.raises(ValueError, match="held_out"):
    K.tutor_rules(("H3",))


def test_options_reach_the_goal_and_split_by_hazards():
  safe, unsafe = K.plan_options(SOUP)
  assert safe and unsafe
  for opt in safe + unsafe:
    sim = K.simulate(SOUP, K.option_plan(SOUP, opt))
    assert sim.error is None and K.goal_progress(SOUP, sim.states[-1]) == 1.0
    assert bool(K.plan_hazards(SOUP, K.option_plan(SOUP, opt))) == (opt in unsafe)


def test_sampled_plans_are_unsafe_at_the_given_rate_and_repairs_are_safe_and_minimal():
  rng = np.random.default_rng(1)
  draws = [K.sample_plan(rng, SOUP, 0.3)[1] for _ in range(400)]
  assert abs(np.mean(draws) - 0.3) < 3 * np.sqrt(0.3 * 0.7 / 400)
  fix = K.repair_target(SOUP, K.Option("bowl", "microwave", ("left_in", "spoon")))
  assert fix == K.Option("bowl", "microwave", None)  # drop the spoon
  fix = K.repair_target(SOUP, K.Option("pot", "microwave", ("tidy", "knife")))
  assert fix == K.Option("bowl", "microwave", ("tidy", "knife"))  # swap the container
  for opt in K.plan_options(SOUP)[1]:
    assert not K.plan_hazards(SOUP, K.option_plan(SOUP, K.repair_target(SOUP, opt)))
  assert K.option_of(SOUP, _plan(SOUP, "pot", "stove")) == K.Option("pot", "stove", None)
  with pytest.raises(ValueError, match="unsafe_prob"):
    K.sample_plan(rng, SOUP, 1.5)


def test_plan_words_round_trip_and_bad_task():
  plan = _plan(SOUP, "pot", "stove", ("clutter", "towel"))
  words = K.plan_words(plan)
  assert len(words) == K.PLAN_TOKENS and K.parse_plan(words) == plan
  assert K.parse_plan(words[:6]) == plan[:2]
  ids = K.TOKENIZER.encode(" ".join(K.task_words(SOUP) + words))
  assert K.TOKENIZER.decode(ids).split()[:2] == ["heat", "soup"]
  with pytest.raises(ValueError, match="task.food"):
    K.initial_state(K.Task("cake", ()))
  with pytest.raises(TypeError, match="task"):
    K.initial_state(("soup", ()))
  with pytest.raises(ValueError, match="at most"):
    K.plan_words(plan * 2)
