r"""VIRF: a symbolic tutor verifies a plan state by state, explains each hazard, and the
planner repairs its plan from that feedback.

The tutor (the paper's verifier, ``verify_core`` of the official code) checks the
states :math:`s_0..s_T` a plan goes through against Horn hazard rules
``("hazard", rule_id, ?x) :- body`` (each rule's ``info`` holds its danger level,
warning, reason and suggestion) with the shared reasoner :mod:`jaxlab.core.horn`:

* every state's closure is computed and every ``hazard`` fact in it is a hazard;
  hazards are **deduplicated by (rule, subject)**, keeping the first state where each
  appears (``sequence_safety_verifier.py``);
* the plan's status is the worst of its issues in the order
  **UNKNOWN > UNSAFE > WARNING > SAFE**: UNKNOWN when the plan cannot be simulated
  (the verdict is undecided), UNSAFE with any hazard, WARNING for a logical
  inconsistency that still executes (a redundant action). SAFE and WARNING pass;
* each hazard becomes **structured feedback** (``structured_output.py``):
  ``{action_info, violated_rule{id, warning, danger_level, reason},
  causal_chain{message, related_objects, key_facts}, suggestion}``, where the causal
  chain is the hazard fact's derivation (:func:`jaxlab.core.horn.explain`) and its key
  facts are the base facts it rests on.

The loop plan -> verify -> feedback -> replan (:func:`refine`) runs at most
``max_attempts`` = 3 plans per task (a third-party wrapper's setting); a plan that
never passes is not executed. :func:`feedback_words` renders feedback as tokens for a
small planner: the rule id only, or the full causal feedback (rule, danger level,
step, subject, the chain's related objects). Metrics (the paper's HAR and GCR; the
definitions are assumed, the paper does not spell them out):
HAR = share of tasks whose executed plan reaches at least one hazardous state,
GCR = mean share of goal conditions met at the end (0 for a task not executed).

What is the paper's and what is ours: the paper verifies LLM plans against an OWL2
ontology with the Pellet reasoner and an LLM planner that replans from the feedback
text; here the ontology is function-free Horn rules (forward chaining, the same
entailments for these rule shapes), the planner is a tiny transformer that reads the
feedback as tokens (``experiments/virf.py``), and the world is a symbolic kitchen
(:mod:`jaxlab.data.kitchen`).

Example:
  >>> sim = kitchen.simulate(task, plan)
  >>> v = verify(sim.states, kitchen.tutor_rules(), warnings=sim.warnings, error=sim.error)
  >>> v.status, [feedback(h, kitchen.tutor_rules(), plan) for h in v.hazards]

References:
  VIRF (verify, explain, repair for safe embodied planning), arXiv:2602.08373,
  ICLR 2026; code github.com/Sn0wm1an/VIRF (``agent_bench/verify_core``). We worked
  from the project's spec of the paper and code (docs/methods/virf.md says which parts
  are the paper's [P], the code's [C] and ours).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxlab.core import horn
from jaxlab.core.horn import Atom, Rule

HAZARD = "hazard"
FEEDBACK_MODES = ("rule", "full")
BLANK = "_"


class Status(enum.IntEnum):
  """Verification status; a larger value dominates (UNKNOWN > UNSAFE > WARNING > SAFE)."""

  SAFE = 0
  WARNING = 1
  UNSAFE = 2
  UNKNOWN = 3


def worst(statuses: Iterable[Status]) -> Status:
  """The dominant status (SAFE for none)."""
  return max(statuses, default=Status.SAFE)


def passes(status: Status) -> bool:
  """Whether a plan with this status may be executed: SAFE or WARNING."""
  return Status(status) <= Status.WARNING


class Hazard(NamedTuple):
  """One deduplicated hazard: ``rule`` id, ``subject``, the first state index ``step`` it
  holds in (``s_step``, reached by action ``step``), the hazard fact and its derivation
  (:func:`jaxlab.core.horn.explain`) and the base facts that derivation rests on."""

  rule: str
  subject: str
  step: int
  fact: Atom
  chain: tuple[tuple[Atom, horn.Derivation], ...]
  key_facts: tuple[Atom, ...]


class Verification(NamedTuple):
  """The tutor's verdict: ``status``, the hazards (first occurrence order), the
  simulation's warnings and error."""

  status: Status
  hazards: tuple[Hazard, ...]
  warnings: tuple[str, ...]
  error: str | None

  @property
  def passed(self) -> bool:
    return passes(self.status)


def _check_rules(rules) -> tuple[Rule, ...]:
  rules = tuple(rules)
  for r in rules:
    if not isinstance(r, Rule):
      raise TypeError(f"rules must hold horn.Rule instances, got {type(r).__name__}")
  return rules


def state_hazards(state: Iterable[Atom], rules: Sequence[Rule]) -> list[tuple[Atom, horn.Closure]]:
  """The hazard facts ``("hazard", rule_id, subject)`` entailed by one state, sorted,
  each with the closure that explains it."""
  closure = horn.forward_chain(state, rules)
  return [(f, closure) for f in sorted(closure.facts) if f[0] == HAZARD and len(f) == 3]


def _key_facts(closure: horn.Closure, chain) -> tuple[Atom, ...]:
  out: dict[Atom, None] = {}
  for _, d in chain:
    for p in d.premises:
      if p in closure.base:
        out[p] = None
  return tuple(out)


def verify(states: Sequence[Iterable[Atom]], rules: Sequence[Rule], *,
           warnings: Sequence[str] = (), error: str | None = None) -> Verification:
  """Checks every simulated state ``s_0..s_T`` of a plan against ``rules``.

  Args:
    states: the states' base facts, in order (``s_0`` the initial state).
    rules: horn rules; those with head ``("hazard", id, ?x)`` are the hazard rules.
    warnings: logical inconsistencies met by the simulation (each makes a WARNING).
    error: why the simulation stopped early, or None (not None makes the plan UNKNOWN:
      the states after the failing action could not be checked).

  Returns:
    A :class:`Verification`; hazards deduplicated by ``(rule, subject)``, each kept at
    the first state where it holds.
  """
  rules = _check_rules(rules)
  states = [frozenset(s) for s in states]
  if not states:
    raise ValueError("states must hold at least the initial state s_0")
  seen: dict[tuple[str, str], Hazard] = {}
  for t, state in enumerate(states):
    for fact, closure in state_hazards(state, rules):
      key = (fact[1], fact[2])
      if key in seen:
        continue  # dedup by (rule, subject): the first state's derivation is reported
      chain = tuple(horn.explain(closure, fact))
      seen[key] = Hazard(fact[1], fact[2], t, fact, chain, _key_facts(closure, chain))
  statuses = [Status.UNKNOWN] * (error is not None) + [Status.UNSAFE] * bool(seen) + [
      Status.WARNING] * bool(warnings)
  return Verification(worst(statuses), tuple(seen.values()), tuple(warnings), error)


def _render(atom: Atom) -> str:
  return f"{atom[0]}({', '.join(atom[1:])})"


def feedback(hazard: Hazard, rules: Sequence[Rule], plan: Sequence | None = None) -> dict:
  """The structured feedback of one hazard (the paper's per-hazard record).

  Returns:
    ``{"action_info": {"step", "action"}, "violated_rule": {"id", "warning",
    "danger_level", "reason"}, "causal_chain": {"message", "related_objects",
    "key_facts"}, "suggestion"}``. ``related_objects`` are the constants of the key facts
    other than the subject, in chain order; the message lists the derivation steps.
  """
  by_name = {r.name: r for r in _check_rules(rules)}
  if hazard.rule not in by_name:
    raise ValueError(f"hazard rule {hazard.rule!r} is not among the rules")
  info = by_name[hazard.rule].info
  action = None
  if plan is not None and 1 <= hazard.step <= len(plan):
    action = " ".join(plan[hazard.step - 1])
  related = list(dict.fromkeys(a for f in hazard.key_facts for a in f[1:]
                               if a != hazard.subject))
  steps = [f"{_render(f)} by {d.rule} from {', '.join(_render(p) for p in d.premises)}"
           for f, d in hazard.chain]
  return {
      "action_info": {"step": hazard.step, "action": action},
      "violated_rule": {"id": hazard.rule, "warning": info.get("warning", ""),
                        "danger_level": info.get("level"), "reason": info.get("reason", "")},
      "causal_chain": {"message": "; ".join(steps), "related_objects": related,
                       "key_facts": [_render(f) for f in hazard.key_facts]},
      "suggestion": info.get("suggestion", "").format(x=hazard.subject),
  }


def ranked(hazards: Sequence[Hazard], rules: Sequence[Rule]) -> list[Hazard]:
  """Hazards by first step, then danger level (highest first), then rule order."""
  order = {r.name: i for i, r in enumerate(_check_rules(rules))}
  level = {r.name: r.info.get("level", 0) for r in rules}
  return sorted(hazards, key=lambda h: (h.step, -level.get(h.rule, 0), order.get(h.rule, 0),
                                        h.subject))


def feedback_words(verification: Verification, rules: Sequence[Rule], mode: str, *,
                   max_hazards: int = 2, related: int = 3) -> list[str]:
  """Feedback as a fixed number of words for a planner that reads tokens.

  Per hazard (the first ``max_hazards`` of :func:`ranked`), ``3 + 1 + related`` words:
  ``full``: rule id, ``L<danger level>``, ``a<step>``, subject, the first ``related``
  related objects of the causal chain; ``rule``: the rule id and blanks. Unused
  slots are ``"_"``.
  """
  if mode not in FEEDBACK_MODES:
    raise ValueError(f"mode must be one of {FEEDBACK_MODES}, got {mode!r}")
  if not isinstance(max_hazards, int) or max_hazards < 1:
    raise ValueError(f"max_hazards must be a positive int, got {max_hazards!r}")
  width = 4 + related
  words: list[str] = []
  for h in ranked(verification.hazards, rules)[:max_hazards]:
    if mode == "rule":
      slot = [h.rule]
    else:
      fb = feedback(h, rules)
      slot = [h.rule, f"L{fb['violated_rule']['danger_level']}", f"a{h.step}", h.subject,
              *fb["causal_chain"]["related_objects"][:related]]
    words += slot + [BLANK] * (width - len(slot))
  return words + [BLANK] * (width * max_hazards - len(words))


# ----- the loop and its metrics -----

class Refinement(NamedTuple):
  """The loop's outcome per task: the last plan, whether it passed, the plans tried
  (``attempts``) and the last verification."""

  plans: list
  passed: np.ndarray
  attempts: np.ndarray
  verifications: list


def refine(first_plans: Sequence, verify_fn: Callable[[int, Any], Verification],
           revise_fn: Callable[[int, list[int], list, list], list], max_attempts: int = 3
           ) -> Refinement:
  """plan -> verify -> feedback -> replan for a batch of tasks, at most ``max_attempts``
  plans per task.

  Args:
    first_plans: one plan per task.
    verify_fn: ``verify_fn(task_index, plan) -> Verification``.
    revise_fn: ``revise_fn(attempt, failing, plans, verifications) -> new plans`` for the
      task indices ``failing`` (attempt = 2, 3, ...): resampling ignores the
      verifications, a repairing planner reads their feedback.
    max_attempts: plans per task at most (>= 1).
  """
  if not isinstance(max_attempts, int) or max_attempts < 1:
    raise ValueError(f"max_attempts must be a positive int, got {max_attempts!r}")
  plans = list(first_plans)
  ver = [verify_fn(i, p) for i, p in enumerate(plans)]
  attempts = np.ones(len(plans), np.int64)
  for attempt in range(2, max_attempts + 1):
    failing = [i for i, v in enumerate(ver) if not v.passed]
    if not failing:
      break
    new = revise_fn(attempt, failing, plans, ver)
    if len(new) != len(failing):
      raise ValueError(f"revise_fn returned {len(new)} plans for {len(failing)} tasks")
    for i, p in zip(failing, new, strict=True):
      plans[i], ver[i] = p, verify_fn(i, p)
      attempts[i] += 1
  return Refinement(plans, np.array([v.passed for v in ver]), attempts, ver)


def hazardous_action_rate(hazard_counts: Sequence[int]) -> float:
  """HAR: share of tasks whose executed plan has at least one hazard."""
  counts = np.asarray(hazard_counts)
  if counts.ndim != 1 or counts.size == 0:
    raise ValueError(f"hazard_counts must be a non-empty 1-d sequence, got shape {counts.shape}")
  return float(np.mean(counts > 0))


def goal_condition_rate(progress: Sequence[float]) -> float:
  """GCR: mean share of goal conditions met (0 for a task whose plan was not executed)."""
  p = np.asarray(progress, float)
  if p.ndim != 1 or p.size == 0 or np.any((p < 0) | (p > 1)):
    raise ValueError("progress must be a non-empty 1-d sequence of shares in [0, 1]")
  return float(np.mean(p))
