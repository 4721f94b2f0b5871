"""The verdict protocol: how every experiment decides a claim from its record (issue 41).

A claim names its metric, two arms, the direction and a margin ``δ`` that matters, and the
unit of analysis. ``D`` is the paired difference in the claimed direction (arm ``a`` minus
arm ``b``, or ``b - a`` where lower is better), and ``[L, U]`` its 95% interval:

* unit ``"seed"`` (arms train models): a t interval over the per-seed differences
  (:func:`jaxlab.core.stats.t_interval`), at least 5 seeds;
* unit ``"item"`` (the model is fixed and only inference differs: instances, questions,
  prompts): a paired bootstrap over at least 200 items with the seeds as strata
  (:func:`jaxlab.core.stats.bootstrap_interval`).

The rule (:func:`rule`):

* *superiority* ("A beats B"): **held** if ``L > 0`` and ``U >= δ``; **refuted** if
  ``U < δ`` (reversed if also ``U < 0``, else only smaller than δ); **inconclusive** otherwise;
* *non-inferiority* ("A matches B", "within δ"): **held** if ``L > -δ``; **refuted** if
  ``U < -δ``; **inconclusive** otherwise.

Every claim carries controls and guards, declared before the run: a positive control (a
setting where the effect must show: an oracle, a planted effect; it passes when the same rule
calls it held) and a negative control (shuffled labels, blank feedback, disjoint heads: it
fails when the rule would call its null effect held), and floor/ceiling guards on the
baseline. A failed control, a guarded baseline, too few units, or a record made from a dirty
tree gives **cannot tell**, with the reason, never held or refuted. A claim the time cap
cannot power is declared ``underpowered`` in its spec, before its run.

An experiment ported to the protocol lists its claims as :class:`ClaimSpec` (``CLAIMS``, the
primary one first) and its ``claims(result)`` returns :func:`decide` of them. Everything that
reports verdicts (``run_all``, ``experiments.docs``, the contract test) goes through
:func:`method_decisions`, which answers "cannot tell: test bed under repair" for a method the
registry (:mod:`experiments.methods`) does not mark as ported, whatever its script says.

Arms are read from the record by :class:`Arm`, a path with ``*`` over lists
(``"runs.*.after.group_match"``) and a filter on the listed elements; the same path writes
values back (:meth:`Arm.put`), which is how the contract test plants synthetic effects.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxlab.core.stats import Interval, bootstrap_interval, spread, t_interval, units_needed

VERDICTS = ("held", "refuted", "inconclusive", "cannot tell")
KINDS = ("superiority", "non-inferiority")
UNITS = ("seed", "item")
MIN_UNITS = {"seed": 5, "item": 200}  # the protocol's floors: t over >= 5 seeds, >= 200 items
LEVEL = 0.95
RESAMPLES = 2000


_NUMBERS = (float, int, np.float64, np.float32)  # the fast path of Arm.get's value check


def _check_margin(name: str, value: Any) -> None:
  """A margin is a finite real number > 0 (``np.float32`` included, ``bool`` not)."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real)
      or not math.isfinite(value) or value <= 0):
    raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


# ---------------------------------------------------------------------------
# Reading arms from a record.


@dataclasses.dataclass(frozen=True)
class Arm:
  """Where one arm's per-unit values live in a results record.

  ``path`` is dotted keys, where ``*`` steps into every element of a list. The first ``*``
  ranges over the runs (seeds); with a second ``*`` the values are items and the first
  ``*``'s index is their stratum. ``where`` keeps only the elements at the first ``*`` whose
  fields equal the given values (``{"order_noise": 0.45}``). Units keep the record's order,
  so two arms pair by position; where the elements carry a ``"seed"``, :func:`paired` checks
  that the two arms list the same seeds.

  Example::

    Arm("runs.*.after.group_match", where={"order_noise": 0.45})
  """

  path: str
  where: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  label: str = ""  # how the reports name the arm (default: the path)

  def __post_init__(self):
    if not isinstance(self.path, str) or not self.path or "*" not in self.path.split("."):
      raise ValueError(f"path must be dotted keys with at least one '*' over the units, got "
                       f"{self.path!r}")
    if not isinstance(self.where, Mapping):
      raise TypeError(f"where must be a mapping of field -> value, got {self.where!r}")

  @property
  def stars(self) -> int:
    """How many ``*`` the path has: 1 for per-seed values, 2 for per-item values."""
    return self.path.split(".").count("*")

  @property
  def name(self) -> str:
    return self.label or self.path

  def _kept(self, element: Any) -> bool:
    """Whether an element of the unit list passes the ``where`` filter."""
    return all(isinstance(element, dict) and element.get(k) == v for k, v in self.where.items())

  def _walk(self, node: Any, parts: Sequence[str], stars: tuple, seen: int, out: list) -> None:
    if not parts:
      out.append((stars, node))
      return
    head, rest = parts[0], parts[1:]
    if head == "*":
      if not isinstance(node, list):
        raise ValueError(f"arm {self.name!r}: '*' needs a list, got {type(node).__name__}")
      for i, el in enumerate(node):
        if seen == 0 and not self._kept(el):
          continue
        self._walk(el, rest, (*stars, (i, el)), seen + 1, out)
      return
    if not isinstance(node, dict) or head not in node:
      raise KeyError(f"arm {self.name!r}: no key {head!r} on the path {self.path!r}")
    self._walk(node[head], rest, stars, seen, out)

  def leaves(self, record: dict) -> list[tuple[tuple, Any]]:
    out: list = []
    self._walk(record, self.path.split("."), (), 0, out)
    return out

  def get(self, record: dict) -> tuple[np.ndarray, np.ndarray, list]:
    """``(values, strata, seeds)``: per-unit values, each unit's stratum (its index at the
    first ``*``, or 0 for seed units) and the seeds of the first ``*``'s elements (``None``
    where they carry none)."""
    leaves = self.leaves(record)
    bad = [v for _, v in leaves if v is not None and type(v) not in _NUMBERS
           and (isinstance(v, bool) or not isinstance(v, numbers.Real))]
    if bad:
      raise ValueError(f"arm {self.name!r}: values must be numbers (or null), got {bad[0]!r}")
    values = np.asarray([np.nan if v is None else float(v) for _, v in leaves], np.float64)
    strata = np.asarray([stars[0][0] if len(stars) > 1 else 0 for stars, _ in leaves])
    seeds = [stars[0][1].get("seed") if isinstance(stars[0][1], dict) else None
             for stars, _ in leaves]
    return values, strata, seeds

  def put(self, record: dict, values: Sequence[float]) -> dict:
    """A deep copy of ``record`` with this arm's per-unit values replaced by ``values``."""
    record = copy.deepcopy(record)
    parts = self.path.split(".")
    slots = []  # (container, key) of every leaf, in get()'s order

    def walk(node, parts, seen):
      head, rest = parts[0], parts[1:]
      if head == "*":
        for i, el in enumerate(node):
          if seen == 0 and not self._kept(el):
            continue
          if rest:
            walk(el, rest, seen + 1)
          else:
            slots.append((node, i))
        return
      if not isinstance(node, dict) or head not in node:
        raise KeyError(f"arm {self.name!r}: no key {head!r} on the path {self.path!r}")
      if rest:
        walk(node[head], rest, seen)
      else:
        slots.append((node, head))

    walk(record, parts, 0)
    if len(slots) != len(values):
      raise ValueError(f"arm {self.name!r}: {len(values)} values for {len(slots)} units")
    for (node, key), v in zip(slots, values, strict=True):
      node[key] = float(v)
    return record

  def lists(self) -> list[str]:
    """The dotted path of the list at the first ``*`` (what :func:`replicate` extends)."""
    parts = self.path.split(".")
    return [".".join(parts[:parts.index("*")])]


@dataclasses.dataclass(frozen=True)
class Comparison:
  """Arm ``a`` against arm ``b`` in the claimed direction: ``D = a - b`` where higher is
  better, ``b - a`` where lower is."""

  a: Arm
  b: Arm
  higher_is_better: bool = True

  def __post_init__(self):
    if not (isinstance(self.a, Arm) and isinstance(self.b, Arm)):
      raise TypeError(f"a and b must be Arm, got {type(self.a).__name__} and "
                      f"{type(self.b).__name__}")
    if not isinstance(self.higher_is_better, bool):
      raise TypeError(f"higher_is_better must be a bool, got {self.higher_is_better!r}")
    if self.a.stars != self.b.stars:
      raise ValueError(f"arms {self.a.name!r} and {self.b.name!r} must have the same unit "
                       f"(one '*' for seeds, two for items)")

  def diffs(self, record: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit paired differences ``D`` in the claimed direction, and their strata."""
    return paired(self.a, self.b, record, self.higher_is_better)


def paired(a: Arm, b: Arm, record: dict, higher_is_better: bool = True
           ) -> tuple[np.ndarray, np.ndarray]:
  """``(D, strata)`` of arms ``a`` and ``b`` paired by position (same seeds where known)."""
  va, sa, seeds_a = a.get(record)
  vb, _, seeds_b = b.get(record)
  if va.shape != vb.shape:
    raise ValueError(f"arms {a.name!r} and {b.name!r} have {va.size} and {vb.size} units; "
                     "paired arms need the same units")
  if None not in seeds_a and None not in seeds_b and seeds_a != seeds_b:
    raise ValueError(f"arms {a.name!r} and {b.name!r} list different seeds: {seeds_a} vs "
                     f"{seeds_b}")
  d = va - vb if higher_is_better else vb - va
  return d, sa


# ---------------------------------------------------------------------------
# Claims, controls and guards.


@dataclasses.dataclass(frozen=True)
class Control:
  """A control, declared before the run.

  ``kind="positive"``: a setting where the claimed effect must appear if the test bed can see
  it; passes when the protocol's rule calls ``D >= margin`` held. ``kind="negative"``: a
  setting with no effect (shuffled labels, blank feedback, disjoint heads); fails when the
  same rule would call its effect held.
  """

  name: str
  compare: Comparison
  margin: float
  kind: str = "positive"

  def __post_init__(self):
    if self.kind not in ("positive", "negative"):
      raise ValueError(f"kind must be 'positive' or 'negative', got {self.kind!r}")
    if not isinstance(self.compare, Comparison):
      raise TypeError(f"compare must be a Comparison, got {type(self.compare).__name__}")
    _check_margin("margin", self.margin)


@dataclasses.dataclass(frozen=True)
class Guard:
  """The baseline's mean must be more than ``distance`` above ``floor`` (chance) and below
  ``ceiling`` (the maximum); otherwise the test bed cannot move and the claim cannot tell."""

  name: str
  arm: Arm
  floor: float | None = None
  ceiling: float | None = None
  distance: float = 0.0

  def __post_init__(self):
    if not isinstance(self.arm, Arm):
      raise TypeError(f"guard {self.name!r}: arm must be an Arm, got {type(self.arm).__name__}")
    if self.floor is None and self.ceiling is None:
      raise ValueError(f"guard {self.name!r}: give a floor, a ceiling or both")
    if not (isinstance(self.distance, numbers.Real) and self.distance >= 0):
      raise ValueError(f"guard {self.name!r}: distance must be >= 0, got {self.distance!r}")
    if (self.floor is not None and self.ceiling is not None
        and not self.floor + self.distance < self.ceiling - self.distance):
      raise ValueError(f"guard {self.name!r}: floor + distance must be below ceiling - "
                       f"distance, got floor {self.floor}, ceiling {self.ceiling}, distance "
                       f"{self.distance}")

  def check(self, record: dict) -> str | None:
    """``None`` if the baseline can move, else why not."""
    m = float(np.mean(self.arm.get(record)[0]))
    if not math.isfinite(m):
      return f"{self.name} is not finite ({m})"
    if self.floor is not None and m <= self.floor + self.distance:
      return f"{self.name} {m:.3g} is at the floor ({self.floor:g} + {self.distance:g})"
    if self.ceiling is not None and m >= self.ceiling - self.distance:
      return f"{self.name} {m:.3g} is at the ceiling ({self.ceiling:g} - {self.distance:g})"
    return None


@dataclasses.dataclass(frozen=True)
class ClaimSpec:
  """One claim of a paper, its decision rule and its controls, committed before the full run.

  ``underpowered``: set (to the units the claim would need, e.g. ``"needs n ≈ 40 seeds"``)
  when the time cap cannot buy a half-width of at most ``margin / 2``; the claim then reads
  "cannot tell: underpowered" whatever the run shows.
  """

  claim: str  # the paper's claim, one sentence
  metric: str  # what is measured, with its units
  compare: Comparison
  margin: float  # δ > 0, in the metric's units
  positive: Control
  negative: Control
  guards: tuple[Guard, ...]
  kind: str = "superiority"
  unit: str = "seed"
  primary: bool = False
  underpowered: str | None = None
  fmt: str = ".3g"  # how the measured text prints the metric
  why: str = ""  # one sentence: why this claim, this margin (the method's page prints it)

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
    if self.unit not in UNITS:
      raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
    _check_margin("margin", self.margin)
    if not isinstance(self.compare, Comparison):
      raise TypeError(f"compare must be a Comparison, got {type(self.compare).__name__}")
    if not (isinstance(self.positive, Control) and isinstance(self.negative, Control)):
      raise TypeError("positive and negative must be Control")
    stars = 1 if self.unit == "seed" else 2
    for c in (self.compare, self.positive.compare, self.negative.compare):
      if c.a.stars != stars:
        raise ValueError(f"unit {self.unit!r} reads arms with {stars} '*' (one per seed, or "
                         f"seeds then items), got {c.a.path!r}")
    if self.positive.kind != "positive" or self.negative.kind != "negative":
      raise ValueError("positive must be a positive control and negative a negative one")
    if not self.guards or not all(isinstance(g, Guard) for g in self.guards):
      raise ValueError(f"claim {self.claim!r}: declare at least one floor/ceiling Guard")

  def arms(self) -> list[Arm]:
    """Every arm the decision reads (the contract test plants values in them)."""
    out = [self.compare.a, self.compare.b]
    for c in (self.positive, self.negative):
      out += [c.compare.a, c.compare.b]
    return out + [g.arm for g in self.guards]


class Decision(NamedTuple):
  """One claim's verdict and what it was decided from (a row of every report)."""

  claim: str
  measured: str  # D, [L, U], δ, the unit and the arms' means
  verdict: str  # one of VERDICTS
  reason: str  # why ("L > 0 and U >= δ", "reversed", "positive control failed: ...")
  primary: bool = False
  interval: tuple[float, float, float, int] | None = None  # (D, L, U, n)
  margin: float | None = None

  @property
  def text(self) -> str:
    """The verdict as the reports print it (``"refuted (reversed)"``)."""
    return self.verdict if not self.reason else f"{self.verdict} ({self.reason})"


def rule(interval: Interval, margin: float, kind: str) -> tuple[str, str]:
  """``(verdict, reason)`` of the protocol's rule on ``[L, U]`` for margin ``δ``."""
  _check_margin("margin", margin)
  lo, hi = interval.lo, interval.hi
  if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
    raise ValueError(f"interval must be finite with lo <= hi, got [{lo}, {hi}]")
  if kind == "superiority":
    if lo > 0 and hi >= margin:
      return "held", "L > 0 and U ≥ δ"
    if hi < margin:
      return "refuted", "reversed" if hi < 0 else "smaller than δ"
    return "inconclusive", "the interval spans 0 or stops short of δ"
  if kind == "non-inferiority":
    if lo > -margin:
      return "held", "L > -δ"
    if hi < -margin:
      return "refuted", "worse by more than δ"
    return "inconclusive", "the interval spans -δ"
  raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def interval(d: np.ndarray, strata: np.ndarray, unit: str) -> Interval:
  """The protocol's 95% interval of the mean of ``d`` for the unit (t over seeds, stratified
  paired bootstrap over items)."""
  if unit == "seed":
    return t_interval(d, LEVEL)
  return bootstrap_interval(d, strata, LEVEL, RESAMPLES, seed=0)


def _fmt(x: float, fmt: str) -> str:
  return format(x, fmt)


def _control(control: Control, record: dict, unit: str, fmt: str) -> str | None:
  """``None`` if ``control`` passes, else why it failed."""
  d, strata = control.compare.diffs(record)
  if d.size < 2 or not np.all(np.isfinite(d)):
    return f"{control.kind} control '{control.name}' has {d.size} finite units"
  iv = interval(d, strata, unit)
  verdict, _ = rule(iv, control.margin, "superiority")
  shown = (f"D = {_fmt(iv.mean, '+' + fmt)} [{_fmt(iv.lo, '+' + fmt)}, "
           f"{_fmt(iv.hi, '+' + fmt)}], margin {control.margin:g}")
  if control.kind == "positive" and verdict != "held":
    return f"positive control failed: {control.name}, {shown}"
  if control.kind == "negative" and verdict == "held":
    return f"negative control failed: {control.name} shows the effect, {shown}"
  return None


def _checks(spec: ClaimSpec, record: dict) -> list[str]:
  """Why the claim's controls or guards fail on ``record`` (empty: they pass)."""
  return [r for r in (_control(spec.positive, record, spec.unit, spec.fmt),
                      _control(spec.negative, record, spec.unit, spec.fmt),
                      *(g.check(record) for g in spec.guards)) if r is not None]


def decide_one(spec: ClaimSpec, record: dict) -> Decision:
  """One claim's :class:`Decision` under the protocol."""
  d, strata = spec.compare.diffs(record)
  va = spec.compare.a.get(record)[0]
  vb = spec.compare.b.get(record)[0]
  n = int(d.size)
  unit_word = "seeds" if spec.unit == "seed" else "items"
  arms = (f"{spec.compare.a.name} {spread(va).mean:{spec.fmt}} vs {spec.compare.b.name} "
          f"{spread(vb).mean:{spec.fmt}}")
  base = dict(claim=spec.claim, primary=spec.primary, margin=float(spec.margin))
  if n < 2 or not np.all(np.isfinite(d)):
    return Decision(measured=f"{spec.metric}: {arms}; {n} units, not all finite",
                    verdict="cannot tell", reason="no finite paired differences", **base)
  iv = interval(d, strata, spec.unit)
  measured = (f"{spec.metric}: D = {_fmt(iv.mean, '+' + spec.fmt)} "
              f"[{_fmt(iv.lo, '+' + spec.fmt)}, {_fmt(iv.hi, '+' + spec.fmt)}] "
              f"({iv.method}), δ = {spec.margin:g} ({spec.kind}); {arms}")
  base.update(measured=measured, interval=(iv.mean, iv.lo, iv.hi, n))
  dirty = (record.get("provenance") or {}).get("git_dirty")
  if dirty is not False:
    return Decision(verdict="cannot tell", reason="record made from a dirty tree" if dirty
                    else "record without provenance (git state unknown)", **base)
  if spec.underpowered is not None:  # decided before the run; the controls are still shown
    checks = _checks(spec, record)
    return Decision(verdict="cannot tell", reason=f"underpowered ({spec.underpowered}); "
                    + ("; ".join(checks) if checks else "controls and guards pass"), **base)
  if n < MIN_UNITS[spec.unit]:
    need = units_needed(d, spec.margin) if np.std(d) > 0 else MIN_UNITS[spec.unit]
    return Decision(verdict="cannot tell",
                    reason=f"underpowered ({n} {unit_word} < {MIN_UNITS[spec.unit]}; "
                           f"needs n ≈ {max(need, MIN_UNITS[spec.unit])})", **base)
  failures = _checks(spec, record)
  if failures:
    return Decision(verdict="cannot tell", reason="; ".join(failures), **base)
  verdict, reason = rule(iv, spec.margin, spec.kind)
  return Decision(verdict=verdict, reason=reason, **base)


def decide(specs: Sequence[ClaimSpec], record: dict) -> list[Decision]:
  """Every claim's :class:`Decision`; exactly one spec must be primary, and it comes first."""
  specs = list(specs)
  if not specs or not specs[0].primary or sum(s.primary for s in specs) != 1:
    raise ValueError("specs must list exactly one primary claim, first")
  return [decide_one(s, record) for s in specs]


# ---------------------------------------------------------------------------
# Methods not yet ported, and the one entry point every report uses.


def under_repair(rows: Sequence[Any], issue: int | None) -> list[Decision]:
  """The rows of an unported method's own ``claims()`` (``Claim(claim, measured, held)``) as
  "cannot tell: test bed under repair"; the first row stands as the primary claim. The
  script's own rule (a sign of a mean, a count of seeds) is kept in the reason, marked as
  such, so a reader sees what it said and that it decides nothing."""
  old = {True: "held", False: "not held", None: "untested"}
  where = f", issue {issue}" if issue is not None else ""
  return [Decision(claim=r.claim, measured=r.measured, verdict="cannot tell",
                   reason=f"test bed under repair{where}; the script's old rule: {old[r.held]}",
                   primary=i == 0) for i, r in enumerate(rows)]


def method_decisions(method: Any, record: dict) -> list[Decision]:
  """``method``'s verdicts on ``record``: its ``claims()`` where the registry marks it ported
  (which must return protocol decisions), else :func:`under_repair` of them."""
  rows = method.experiment().claims(record)
  if not method.ported:
    from experiments.reporting import check_claims  # noqa: PLC0415 (the old rows' checks)

    return under_repair(check_claims(rows), method.repair_issue)
  return check_decisions(rows)


def check_decisions(rows: Sequence[Any]) -> list[Decision]:
  """``rows`` if each is a :class:`Decision` with a known verdict and exactly one primary,
  first; raises ``TypeError`` / ``ValueError`` naming the first bad row."""
  rows = list(rows)
  for i, row in enumerate(rows):
    if not isinstance(row, Decision):
      raise TypeError(f"claims row {i} must be a protocol Decision, got {type(row).__name__}")
    if row.verdict not in VERDICTS:
      raise ValueError(f"claims row {i}: verdict must be one of {VERDICTS}, got "
                       f"{row.verdict!r}")
  if not rows or not rows[0].primary or sum(r.primary for r in rows) != 1:
    raise ValueError("claims rows must hold exactly one primary claim, first")
  return rows


def describe(spec: ClaimSpec) -> str:
  """How ``spec`` is decided, in words: its margin and unit, why, its controls and guards
  (what a method's page prints under its verdicts)."""
  def bounds(g: Guard) -> str:
    parts = ([f"above {g.floor:g} + {g.distance:g}"] if g.floor is not None else []) + (
        [f"below {g.ceiling:g} - {g.distance:g}"] if g.ceiling is not None else [])
    return f"{g.name} {' and '.join(parts)}"

  unit = "t interval over seeds" if spec.unit == "seed" else "paired bootstrap over items"
  text = (f"**{spec.claim}**{' (primary)' if spec.primary else ''}: {spec.kind}, "
          f"δ = {spec.margin:g} ({spec.metric}), {unit}.")
  if spec.why:
    text += f" Why: {spec.why}."
  text += (f" Positive control: {spec.positive.name} (must clear {spec.positive.margin:g}); "
           f"negative control: {spec.negative.name} (must not clear "
           f"{spec.negative.margin:g}); guards: {'; '.join(bounds(g) for g in spec.guards)}.")
  if spec.underpowered:
    text += f" Declared underpowered before the run: {spec.underpowered}."
  return text


def counts(decisions: Sequence[Decision]) -> dict[str, int]:
  """How many decisions have each verdict (every verdict present, zeros included)."""
  return {v: sum(d.verdict == v for d in decisions) for v in VERDICTS}


# ---------------------------------------------------------------------------
# Synthetic records for the contract test.


def _get_path(record: dict, path: str) -> Any:
  node = record
  for key in path.split(".") if path else []:
    node = node[key]
  return node


def replicate(record: dict, specs: Sequence[ClaimSpec], units: int,
              target: ClaimSpec | None = None) -> dict:
  """A copy of ``record`` whose unit lists (the first ``*`` of every arm of ``specs``) are
  repeated until every arm of ``target`` (default: of every spec) has at least ``units``
  units; repeated elements that carry a ``"seed"`` get fresh seeds (the copy's index times one
  more than the largest seed)."""
  record = copy.deepcopy(record)
  paths = sorted({p for s in specs for arm in s.arms() for p in arm.lists()})
  counted = [target] if target is not None else specs
  fewest = min(arm.get(record)[0].size for s in counted for arm in s.arms())
  if fewest == 0:
    raise ValueError("an arm has no units in the record to replicate")
  copies = -(-units // fewest)
  for path in paths:
    parent, _, key = path.rpartition(".")
    holder = _get_path(record, parent)
    items = holder[key]
    seeds = [el["seed"] for el in items if isinstance(el, dict) and "seed" in el]
    offset = (max(seeds) + 1) if seeds and all(isinstance(s, int) for s in seeds) else 0
    grown = []
    for c in range(copies):
      for el in items:
        el = copy.deepcopy(el)
        if c and offset and isinstance(el, dict) and "seed" in el:
          el["seed"] = el["seed"] + c * offset
        grown.append(el)
    holder[key] = grown
  return record


class Case(NamedTuple):
  """A synthetic case: effects in multiples of the margin, and what else is wrong."""

  main: float  # the claim's effect, in δ
  positive: float  # the positive control's effect, in its margins
  negative: float  # the negative control's effect, in its margins
  noise: float  # sd of each unit's difference, in margins (made exact: see _plant)
  expected: str | None  # the verdict for a superiority claim (None: see expected())


CASES = {
    "planted": Case(2.0, 2.0, 0.0, 0.25, "held"),  # a planted effect of 2δ
    "null": Case(0.1, 2.0, 0.0, 0.25, "refuted"),  # +δ/10: a positive mean that does not matter
    "reversed": Case(-2.0, 2.0, 0.0, 0.25, "refuted"),  # the effect the other way
    "uncertain": Case(0.5, 2.0, 0.0, -2.0, "inconclusive"),  # [L, U] spans both 0 and δ
    "positive control fails": Case(2.0, 0.0, 0.0, 0.25, "cannot tell"),
    "negative control fails": Case(2.0, 2.0, 2.0, 0.25, "cannot tell"),
    "dirty tree": Case(2.0, 2.0, 0.0, 0.25, "cannot tell"),
    "too few units": Case(2.0, 2.0, 0.0, 0.25, "cannot tell"),
}
# a negative noise means "so wide that the interval's half-width is |noise| margins"


def cases(spec: ClaimSpec) -> list[str]:
  """Every synthetic case for ``spec``: :data:`CASES` and one guard-at-its-bound per guard."""
  return [*CASES, *(f"guard {i} at its bound" for i in range(len(spec.guards)))]


def expected(spec: ClaimSpec, case: str) -> str:
  """The verdict the protocol must give ``spec`` on :func:`synthetic`'s ``case``."""
  if case not in cases(spec):
    raise ValueError(f"case must be one of {cases(spec)}, got {case!r}")
  if case.startswith("guard ") or spec.underpowered is not None:
    return "cannot tell"  # a claim declared underpowered cannot tell whatever it measures
  want = CASES[case].expected
  if spec.kind == "non-inferiority" and case == "null":  # +δ/10 is no worse than -δ
    return "held"
  return want


def _noise(n: int, sd: float, rng: np.random.Generator) -> np.ndarray:
  """Gaussian noise made exact: sample mean 0, sample sd ``sd`` (so a case's interval does
  not depend on the draw)."""
  z = rng.standard_normal(n)
  z = z - z.mean()
  return sd * z / z.std(ddof=1) if n > 1 else np.zeros(n)


def _plant(record: dict, compare: Comparison, effect: float, noise: float,
           rng: np.random.Generator) -> dict:
  """``record`` with arm ``a`` set to arm ``b`` plus ``effect`` in the claimed direction, plus
  exact noise of sd ``noise`` per unit."""
  vb = compare.b.get(record)[0]
  sign = 1.0 if compare.higher_is_better else -1.0
  return compare.a.put(record, vb + sign * (effect + _noise(vb.size, noise, rng)))


def _bound(guard: Guard) -> float:
  return guard.ceiling if guard.ceiling is not None else guard.floor


def _safe(guard: Guard) -> float:
  """A baseline value the guard lets through (mid-way, or clear of its one bound by twice its
  distance, or by 1 without one)."""
  if guard.floor is not None and guard.ceiling is not None:
    return (guard.floor + guard.ceiling) / 2
  step = 2 * guard.distance if guard.distance > 0 else 1.0
  return guard.floor + step if guard.floor is not None else guard.ceiling - step


def _fewer(record: dict, spec: ClaimSpec) -> dict:
  """``record`` with its unit lists cut from the end until the claim has fewer units than
  the protocol's minimum."""
  record = copy.deepcopy(record)
  paths = sorted({p for arm in spec.arms() for p in arm.lists()})
  while spec.compare.a.get(record)[0].size >= MIN_UNITS[spec.unit]:
    for path in paths:
      parent, _, key = path.rpartition(".")
      _get_path(record, parent)[key].pop()
  return record


def synthetic(spec: ClaimSpec, record: dict, case: str, seed: int = 0,
              specs: Sequence[ClaimSpec] | None = None) -> dict:
  """``record`` turned into a synthetic case for ``spec`` (the contract test).

  Units are repeated to the protocol's minimum (:func:`replicate`); every guarded baseline is
  set mid-way between its bounds (for a "guard i at its bound" case, guard ``i``'s baseline is
  put on its bound instead, before anything is planted on it); arm ``a`` is planted at arm
  ``b`` plus the case's effect (:data:`CASES`, in multiples of the margin) plus noise with an
  exact sample sd of ``noise`` margins per unit (for "uncertain", wide enough that the
  interval spans 0 and δ); the positive control gets its effect (2 margins, or none where it
  must fail) and the negative control none (or 2 margins where it must fail). "dirty tree"
  marks the provenance dirty, "too few units" cuts the units below the minimum; every other
  case marks it clean. ``specs``: every claim of the method (so that replication keeps their
  arms' lists aligned; default ``[spec]``). Raises ``ValueError`` if planting one arm
  overwrote another (the method then needs arms that do not share values).
  """
  if case not in cases(spec):
    raise ValueError(f"case must be one of {cases(spec)}, got {case!r}")
  c = CASES.get(case, CASES["planted"])
  rng = np.random.default_rng(seed)
  n_min = MIN_UNITS[spec.unit]
  rec = replicate(record, list(specs or [spec]), n_min, target=spec)
  rec["provenance"] = {**(rec.get("provenance") or {}), "git_dirty": case == "dirty tree"}
  guard_values = {}
  for i, g in enumerate(spec.guards):
    value = _bound(g) if case == f"guard {i} at its bound" else _safe(g)
    rec = g.arm.put(rec, np.full(g.arm.get(rec)[0].size, value))
    guard_values[i] = value
  m = spec.margin
  n = spec.compare.a.get(rec)[0].size
  quantile = 1.96 if spec.unit == "item" else float(_t_quantile(n))
  noise = c.noise * m if c.noise > 0 else -c.noise * m * np.sqrt(n) / quantile
  rec = _plant(rec, spec.compare, c.main * m, noise, rng)
  planted = spec.compare.diffs(rec)[0]
  pm_, nm = spec.positive.margin, spec.negative.margin
  rec = _plant(rec, spec.positive.compare, c.positive * pm_, 0.25 * pm_, rng)
  rec = _plant(rec, spec.negative.compare, c.negative * nm, 0.25 * nm, rng)
  if not np.array_equal(spec.compare.diffs(rec)[0], planted):
    raise ValueError(f"claim {spec.claim!r}: planting the controls changed the claim's own "
                     "arms; give the controls arms of their own")
  for i, g in enumerate(spec.guards):
    if not np.all(g.arm.get(rec)[0] == guard_values[i]):
      raise ValueError(f"claim {spec.claim!r}: planting the arms overwrote guard "
                       f"{g.name!r}; guard a baseline that no arm of the claim plants")
  if case == "too few units":
    rec = _fewer(rec, spec)
  return rec


def _t_quantile(n: int) -> float:
  from scipy import stats  # noqa: PLC0415

  return float(stats.t.ppf((1 + LEVEL) / 2, n - 1))
