r"""Function-free Horn clauses: ground facts, rules with variables, forward chaining with proofs.

A fact is a ground atom, a tuple ``(predicate, arg, ...)`` of strings (``("on",
"bread", "stove")``). A rule ``head :- body_1, ..., body_n`` is a :class:`Rule`
whose atoms may hold variables, strings that start with ``"?"``. Forward
chaining computes the least fixpoint (the closure)

.. math::
  T^{\infty}(F) = \bigcup_{i \ge 0} T^i(F), \qquad
  T(S) = S \cup \{\theta(h) : (h \leftarrow b_1..b_n) \in R,\ \theta(b_j) \in S\ \forall j\},

the set of every fact entailed by the facts :math:`F` and rules :math:`R` (datalog
without negation: finite and unique). Each derived fact keeps the first
:class:`Derivation` found for it (rule name and ground premises), so
:func:`explain` walks any fact back to the base facts: the causal chain that a
verifier reports (VIRF) or the inference a judge checks (RedacBench).

Evaluation is semi-naive: a rule is re-fired in a round only with groundings that
use at least one fact new in the previous round, which gives the same fixpoint
as the naive iteration with far fewer joins. This is host-side Python over small
symbolic sets (tens to thousands of facts); nothing here is traced.

Example:
  >>> rules = [Rule("path", ("path", "?x", "?y"), (("edge", "?x", "?y"),)),
  ...          Rule("step", ("path", "?x", "?z"), (("path", "?x", "?y"), ("edge", "?y", "?z")))]
  >>> closure = forward_chain([("edge", "a", "b"), ("edge", "b", "c")], rules)
  >>> ("path", "a", "c") in closure.facts
  True
  >>> [d.rule for _, d in explain(closure, ("path", "a", "c"))]
  ['path', 'step']

References:
  Ceri, Gottlob, Tanca, "What you always wanted to know about Datalog (and never
  dared to ask)", IEEE TKDE 1989 (least fixpoint, semi-naive evaluation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

Atom = tuple[str, ...]
Substitution = Mapping[str, str]


def is_variable(term: str) -> bool:
  """Whether ``term`` is a variable (a string starting with ``"?"``)."""
  return term.startswith("?")


def _check_atom(name: str, atom, ground: bool) -> Atom:
  if (not isinstance(atom, tuple) or len(atom) < 1
      or not all(isinstance(t, str) and t for t in atom)):
    raise TypeError(f"{name} must be a tuple of non-empty strings (predicate, args...), "
                    f"got {atom!r}")
  if is_variable(atom[0]):
    raise ValueError(f"{name}: the predicate {atom[0]!r} cannot be a variable")
  if ground and any(is_variable(t) for t in atom):
    raise ValueError(f"{name} must be ground (no '?' variables), got {atom!r}")
  return atom


@dataclasses.dataclass(frozen=True)
class Rule:
  """``head :- body``: when every body atom holds under a substitution, so does the head.

  Attributes:
    name: identifier reported in derivations (a rule id such as ``"R3"``).
    head: the concluded atom; its variables must all occur in the body (range
      restriction), so every derived fact is ground.
    body: one or more atoms that must all hold.
    info: free metadata kept with the rule (a danger level, a warning text, ...).
  """

  name: str
  head: Atom
  body: tuple[Atom, ...]
  info: Mapping = dataclasses.field(default_factory=dict, compare=False, hash=False)

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise TypeError(f"Rule.name must be a non-empty string, got {self.name!r}")
    _check_atom(f"Rule {self.name!r} head", self.head, ground=False)
    if not isinstance(self.body, tuple) or not self.body:
      raise ValueError(f"Rule {self.name!r} body must be a non-empty tuple of atoms, "
                       f"got {self.body!r}")
    for atom in self.body:
      _check_atom(f"Rule {self.name!r} body atom", atom, ground=False)
    body_vars = {t for atom in self.body for t in atom[1:] if is_variable(t)}
    free = [t for t in self.head[1:] if is_variable(t) and t not in body_vars]
    if free:
      raise ValueError(f"Rule {self.name!r} is not range-restricted: head variables {free} "
                       "do not occur in the body")


class Derivation(NamedTuple):
  """How a derived fact was first obtained: the rule's name and its ground premises."""

  rule: str
  premises: tuple[Atom, ...]


class Closure(NamedTuple):
  """The least fixpoint of some facts under some rules.

  Attributes:
    facts: every entailed fact (the base facts included).
    base: the given facts.
    proof: for each derived (non-base) fact, its first :class:`Derivation`.
    rounds: the number of rounds until no new fact appeared.
  """

  facts: frozenset[Atom]
  base: frozenset[Atom]
  proof: Mapping[Atom, Derivation]
  rounds: int

  @property
  def derived(self) -> frozenset[Atom]:
    """The entailed facts that are not base facts."""
    return self.facts - self.base


def unify(pattern: Atom, fact: Atom, subst: Substitution) -> dict[str, str] | None:
  """Extends ``subst`` so that ``pattern`` equals the ground ``fact``, or None if it cannot."""
  if len(pattern) != len(fact) or pattern[0] != fact[0]:
    return None
  out = dict(subst)
  for p, f in zip(pattern[1:], fact[1:], strict=True):
    if is_variable(p):
      bound = out.get(p)
      if bound is None:
        out[p] = f
      elif bound != f:
        return None
    elif p != f:
      return None
  return out


def substitute(atom: Atom, subst: Substitution) -> Atom:
  """``atom`` with its variables replaced by their bindings (unbound ones kept)."""
  return (atom[0], *(subst.get(t, t) if is_variable(t) else t for t in atom[1:]))


def _index(facts: Iterable[Atom]) -> dict[tuple[str, int], list[Atom]]:
  idx: dict[tuple[str, int], list[Atom]] = {}
  for f in facts:
    idx.setdefault((f[0], len(f)), []).append(f)
  return idx


def _groundings(body: tuple[Atom, ...], sources: list[dict], subst: dict
                ) -> Iterator[tuple[dict, tuple[Atom, ...]]]:
  """Depth-first join of ``body`` where atom ``j`` is matched against ``sources[j]``."""
  if not body:
    yield subst, ()
    return
  first, rest = body[0], body[1:]
  for fact in sources[0].get((first[0], len(first)), ()):
    s = unify(first, fact, subst)
    if s is not None:
      for s_rest, used in _groundings(rest, sources[1:], s):
        yield s_rest, (fact, *used)


def matches(body: Iterable[Atom], facts: Iterable[Atom]
            ) -> list[tuple[dict[str, str], tuple[Atom, ...]]]:
  """Every substitution under which all ``body`` atoms are in ``facts``, with the facts used.

  Args:
    body: atoms, possibly with variables (a rule body or a conjunctive query).
    facts: ground facts.

  Returns:
    ``[(substitution, premises), ...]`` in a deterministic order (the facts' order).
  """
  body = tuple(_check_atom("body atom", a, ground=False) for a in body)
  idx = _index(_check_atom("fact", f, ground=True) for f in facts)
  return list(_groundings(body, [idx] * len(body), {}))


def forward_chain(facts: Iterable[Atom], rules: Iterable[Rule], max_rounds: int | None = None
                  ) -> Closure:
  """The closure of ``facts`` under ``rules`` by semi-naive forward chaining.

  Args:
    facts: ground atoms (tuples of strings without variables).
    rules: :class:`Rule` instances (range-restricted).
    max_rounds: stop after this many rounds even if facts are still being added
      (``None``: run to the fixpoint, which always exists for function-free rules).

  Returns:
    A :class:`Closure` with the facts, their first derivations and the rounds used.
    Rules fire in the order given, so the recorded derivations are deterministic.
  """
  base = [_check_atom("facts item", f, ground=True) for f in facts]
  rules = list(rules)
  for r in rules:
    if not isinstance(r, Rule):
      raise TypeError(f"rules must hold Rule instances, got {type(r).__name__}")
  if max_rounds is not None and (not isinstance(max_rounds, int) or max_rounds < 0):
    raise ValueError(f"max_rounds must be None or an int >= 0, got {max_rounds!r}")

  known: dict[Atom, None] = dict.fromkeys(base)  # insertion-ordered set
  proof: dict[Atom, Derivation] = {}
  delta = list(known)
  rounds = 0
  while delta and (max_rounds is None or rounds < max_rounds):
    delta_set = set(delta)
    all_idx, new_idx = _index(known), _index(delta)
    old_idx = _index(f for f in known if f not in delta_set)
    fresh: dict[Atom, None] = {}
    for rule in rules:
      n = len(rule.body)
      # semi-naive: atom j takes a new fact, atoms before j old facts, atoms after j any fact
      for j in range(n):
        sources = [old_idx] * j + [new_idx] + [all_idx] * (n - j - 1)
        for subst, used in _groundings(rule.body, sources, {}):
          head = substitute(rule.head, subst)
          if head not in known and head not in fresh:
            fresh[head] = None
            proof[head] = Derivation(rule.name, used)
    rounds += 1
    known.update(fresh)
    delta = list(fresh)
  return Closure(frozenset(known), frozenset(base), proof, rounds)


def explain(closure: Closure, fact: Atom) -> list[tuple[Atom, Derivation]]:
  """The derivation tree of ``fact`` flattened premises-first: ``[(fact, derivation), ...]``.

  Base facts contribute no entry; the last entry derives ``fact`` itself. Raises
  ``ValueError`` if ``fact`` is not in the closure.
  """
  fact = _check_atom("fact", fact, ground=True)
  if fact not in closure.facts:
    raise ValueError(f"fact {fact!r} is not entailed by the closure")
  out: list[tuple[Atom, Derivation]] = []
  seen: set[Atom] = set()

  def visit(f: Atom) -> None:
    if f in seen or f not in closure.proof:
      return
    seen.add(f)
    d = closure.proof[f]
    for p in d.premises:
      visit(p)
    out.append((f, d))

  visit(fact)
  return out


def entails(facts: Iterable[Atom], rules: Iterable[Rule], query: Atom) -> bool:
  """Whether the ground ``query`` is in the closure of ``facts`` under ``rules``."""
  return _check_atom("query", query, ground=True) in forward_chain(facts, rules).facts
