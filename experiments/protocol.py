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
    values = np.asarray([float(v) if v is not None else np.nan for _, v in leaves], np.float64)
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
    if not (isinstance(self.margin, (int, float)) and self.margin > 0):
      raise ValueError(f"margin must be a number > 0, got {self.margin!r}")


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
    if self.floor is None and self.ceiling is None:
      raise ValueError(f"guard {self.name!r}: give a floor, a ceiling or both")
    if not self.distance >= 0:
      raise ValueError(f"guard {self.name!r}: distance must be >= 0, got {self.distance!r}")

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

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
    if self.unit not in UNITS:
      raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
    if not (isinstance(self.margin, (int, float)) and self.margin > 0):
      raise ValueError(f"margin must be a number > 0, got {self.margin!r}")
    if self.positive.kind != "positive" or self.negative.kind != "negative":
      raise ValueError("positive must be a positive control and negative a negative one")
    if not self.guards:
      raise ValueError(f"claim {self.claim!r}: declare at least one floor/ceiling guard")

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
  lo, hi = interval.lo, interval.hi
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
  if record.get("provenance", {}).get("git_dirty") is True:
    return Decision(verdict="cannot tell", reason="record made from a dirty tree", **base)
  if spec.underpowered is not None:
    return Decision(verdict="cannot tell", reason=f"underpowered ({spec.underpowered})", **base)
  if n < MIN_UNITS[spec.unit]:
    need = units_needed(d, spec.margin) if np.std(d) > 0 else MIN_UNITS[spec.unit]
    return Decision(verdict="cannot tell",
                    reason=f"underpowered ({n} {unit_word} < {MIN_UNITS[spec.unit]}; "
                           f"needs n ≈ {max(need, MIN_UNITS[spec.unit])})", **base)
  failures = [r for r in (_control(spec.positive, record, spec.unit, spec.fmt),
                          _control(spec.negative, record, spec.unit, spec.fmt),
                          *(g.check(record) for g in spec.guards)) if r is not None]
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


def replicate(record: dict, specs: Sequence[ClaimSpec], units: int) -> dict:
  """A copy of ``record`` whose unit lists (the first ``*`` of every arm) are repeated until
  every arm of ``specs`` has at least ``units`` units; repeated elements that carry a
  ``"seed"`` get fresh seeds (the copy's index times one more than the largest seed)."""
  record = copy.deepcopy(record)
  paths = sorted({p for s in specs for arm in s.arms() for p in arm.lists()})
  fewest = min(arm.get(record)[0].size for s in specs for arm in s.arms())
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


CASES = {  # case -> (main effect in δ, positive control's effect in its margins,
           #          negative control's effect in its margins, baseline at its guard's bound)
    "planted": (2.0, 2.0, 0.0, False),  # a planted effect of 2δ
    "null": (0.1, 2.0, 0.0, False),  # no effect that matters: +δ/10, a positive mean
    "reversed": (-2.0, 2.0, 0.0, False),  # the effect the other way
    "positive control fails": (2.0, 0.0, 0.0, False),
    "negative control fails": (2.0, 2.0, 2.0, False),
    "baseline at its bound": (2.0, 2.0, 0.0, True),
}
NOISE = 0.25  # the synthetic noise: sd of each unit's difference, in margins


def expected(spec: ClaimSpec, case: str) -> str:
  """The verdict the protocol must give ``spec`` on :func:`synthetic`'s ``case``."""
  if case not in CASES:
    raise ValueError(f"case must be one of {list(CASES)}, got {case!r}")
  if case in ("positive control fails", "negative control fails", "baseline at its bound"):
    return "cannot tell"
  if case == "planted":
    return "held"
  if case == "reversed":
    return "refuted"
  return "refuted" if spec.kind == "superiority" else "held"


def _plant(record: dict, compare: Comparison, effect: float, noise: float,
           rng: np.random.Generator) -> dict:
  """``record`` with arm ``a`` set to arm ``b`` plus ``effect`` in the claimed direction, plus
  Gaussian noise of sd ``noise`` per unit."""
  vb = compare.b.get(record)[0]
  sign = 1.0 if compare.higher_is_better else -1.0
  return compare.a.put(record, vb + sign * (effect + noise * rng.standard_normal(vb.size)))


def _bound(guard: Guard) -> float:
  return guard.ceiling if guard.ceiling is not None else guard.floor


def _safe(guard: Guard) -> float:
  """A baseline value the guard lets through (mid-way, or well clear of its one bound)."""
  if guard.floor is not None and guard.ceiling is not None:
    return (guard.floor + guard.ceiling) / 2
  step = 10 * max(guard.distance, 1.0)
  return guard.floor + step if guard.floor is not None else guard.ceiling - step


def synthetic(spec: ClaimSpec, record: dict, case: str, seed: int = 0,
              specs: Sequence[ClaimSpec] | None = None) -> dict:
  """``record`` turned into a synthetic case for ``spec`` (the contract test).

  Units are repeated to the protocol's minimum (:func:`replicate`); every guarded baseline is
  set mid-way between its bounds (for the last case, the first guard's baseline is put on its
  bound instead, before anything is planted on it); arm ``a`` is planted at arm ``b`` plus the
  case's effect (:data:`CASES`, in multiples of the margin) plus noise of sd ``NOISE`` margins
  per unit; the positive control gets its effect (2 margins, or none where it must fail) and
  the negative control none (or 2 margins where it must fail). ``specs``: every claim of the
  method (so that replication keeps their arms' lists aligned; default ``[spec]``). The
  record's provenance is marked clean. Raises ``ValueError`` if planting one arm overwrote
  another (the method then needs arms that do not share values).
  """
  main, pos, neg, at_bound = CASES[case]
  rng = np.random.default_rng(seed)
  rec = replicate(record, list(specs or [spec]), MIN_UNITS[spec.unit])
  rec["provenance"] = {**rec.get("provenance", {}), "git_dirty": False}
  for g in spec.guards:
    rec = g.arm.put(rec, np.full(g.arm.get(rec)[0].size, _safe(g)))
  if at_bound:  # before planting, so that only the guard can tell this case apart
    g = spec.guards[0]
    rec = g.arm.put(rec, np.full(g.arm.get(rec)[0].size, _bound(g)))
  m, pm_, nm = spec.margin, spec.positive.margin, spec.negative.margin
  rec = _plant(rec, spec.compare, main * m, NOISE * m, rng)
  planted = spec.compare.diffs(rec)[0]
  rec = _plant(rec, spec.positive.compare, pos * pm_, NOISE * pm_, rng)
  rec = _plant(rec, spec.negative.compare, neg * nm, NOISE * nm, rng)
  if not np.array_equal(spec.compare.diffs(rec)[0], planted):
    raise ValueError(f"claim {spec.claim!r}: planting the controls changed the claim's own "
                     "arms; give the controls arms of their own")
  return rec
