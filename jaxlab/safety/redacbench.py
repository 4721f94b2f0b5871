r"""RedacBench: proposition-based Security and Utility of a redaction, with an exact judge.

A text states some facts; its *propositions* are every fact those facts entail, the
implied ones included: the closure :math:`P = T^\infty(F)` of the stated facts ``F``
under Horn rules (:func:`jaxlab.core.horn.forward_chain`). A policy labels each
proposition sensitive or not. A redactor maps the text to a new text; the judge decides
which propositions are still *inferable* from what is left: here exactly, as membership
in the closure of the facts the redacted text still states, :math:`T^\infty(F')`. Per
proposition ``x``:

========================  ===================  ====================
\                         inferable from F'    not inferable
========================  ===================  ====================
non-sensitive             TP (kept)            FN (lost)
sensitive                 FP (leaked)          TN (removed)
========================  ===================  ====================

.. math::
  \mathrm{Security} = \frac{TN}{TN + FP}, \qquad \mathrm{Utility} = \frac{TP}{TP + FN}.

The paper does not say how it pools over texts, so :func:`pooled` gives both the micro
score (counts summed over texts, then the ratio) and the per-text score (the ratio per
text, averaged over the texts where it is defined).

Redactors (:func:`mask_keywords`, :func:`redaction_step`):

* keyword masking: every sentence that states a sensitive fact gets its keyword (its
  last word, the object) replaced by ``<mask>``. Implied sensitive propositions have no
  sentence to mask, so they stay inferable: the failure the paper targets.
* adversarial redaction (the paper's AR: redact, let an adversary infer, redact again):
  one step drops the sentences stating sensitive facts, then, for every sensitive
  proposition still entailed, one base premise of its first derivation
  (:func:`jaxlab.core.horn.explain`), preferring premises whose predicate comes first in
  ``prefer``. :func:`redact_to_fixpoint` repeats it until nothing sensitive is entailed.
  The paper's redactor is an LLM that rewrites freely; ours is a tiny transformer trained
  to imitate one step, deletion-only as the step is: it writes one ``keep`` / ``drop``
  word per sentence (:func:`rewriter_loss`, :func:`rewrite`), applied once or iterated on
  its own output (:func:`iterate`).

What is the paper's and what is ours: the metric (propositions with implied ones, the
labels, the four cells, Security and Utility) is the paper's; its judge is GPT-4.1-mini
(1.45% FN / 2.62% FP error against humans), ours is the exact closure, so its error is
zero by construction. The paper's texts and propositions are extracted by an LLM; ours
are rendered from facts (:mod:`jaxlab.data.fact_texts`).

Example:
  >>> from jaxlab.data import fact_texts as ft
  >>> words = ft.render([("works_at", "p0", "c0"), ("located", "c0", "t1"),
  ...                    ("lives_in", "p0", "t1")])
  >>> masked = mask_keywords(words, POLICY, ft.parse_sentence)  # '... p0 lives_in <mask> .'
  >>> c = score_text(ft.parse(words), ft.parse(masked), ft.RULES, POLICY)
  >>> c.security, c.utility           # in_city(p0, t1) still follows from work: 0.5, 1.0

References:
  "RedacBench: Can AI Erase Your Secrets?", arXiv:2603.20208 (ICLR 2026).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import horn
from jaxlab.core.horn import Atom, Rule
from jaxlab.data import fact_texts
from jaxlab.data.lm_tasks import EOS, Tokenizer
from jaxlab.models import decoding
from jaxlab.models.transformer import next_token_loss

MASK_WORD = "<mask>"
SUBSETS = ("all", "explicit", "implied")
POOLINGS = ("micro", "text")


@dataclasses.dataclass(frozen=True)
class Policy:
  """Which propositions are sensitive: those whose predicate is in ``sensitive``."""

  sensitive: frozenset[str]

  def __post_init__(self):
    if isinstance(self.sensitive, str) or not all(isinstance(p, str) for p in self.sensitive):
      raise TypeError(f"Policy.sensitive must be a set of predicate names, got "
                      f"{self.sensitive!r}")
    object.__setattr__(self, "sensitive", frozenset(self.sensitive))

  def __call__(self, atom: Atom) -> bool:
    return atom[0] in self.sensitive


POLICY = Policy(fact_texts.SENSITIVE)  # whereabouts and health of a person


class Confusion(NamedTuple):
  """Counts of one text (or a pool): TP non-sensitive and inferable, TN sensitive and not,
  FP sensitive and inferable, FN non-sensitive and not."""

  tp: int
  tn: int
  fp: int
  fn: int

  @property
  def security(self) -> float:
    """``TN / (TN + FP)``; NaN without sensitive propositions."""
    d = self.tn + self.fp
    return self.tn / d if d else math.nan

  @property
  def utility(self) -> float:
    """``TP / (TP + FN)``; NaN without non-sensitive propositions."""
    d = self.tp + self.fn
    return self.tp / d if d else math.nan

  def __add__(self, other):  # counts add (tuple concatenation would be wrong here)
    return Confusion(*(a + b for a, b in zip(self, other, strict=True)))


def judge(remaining: Iterable[Atom], rules: Iterable[Rule]) -> frozenset[Atom]:
  """Every proposition inferable from the facts a redacted text still states (the exact
  judge: their forward-chaining closure)."""
  return horn.forward_chain(remaining, rules).facts


def confusion(propositions: Iterable[Atom], sensitive: Callable[[Atom], bool],
              inferable: Iterable[Atom]) -> Confusion:
  """The four counts over ``propositions`` given the labels and the inferable set."""
  inferable = frozenset(inferable)
  tp = tn = fp = fn = 0
  for x in propositions:
    kept = x in inferable
    if sensitive(x):
      fp, tn = fp + kept, tn + (not kept)
    else:
      tp, fn = tp + kept, fn + (not kept)
  return Confusion(tp, tn, fp, fn)


def score_text(original: Iterable[Atom], remaining: Iterable[Atom], rules: Sequence[Rule],
               policy: Policy, subset: str = "all") -> Confusion:
  """The counts of one redaction: propositions = the closure of the ``original`` stated
  facts; inferable = the closure of the ``remaining`` ones.

  Args:
    original: the facts the text stated.
    remaining: the facts the redacted text states (what :func:`fact_texts.parse` reads).
    rules: the Horn rules that imply propositions.
    policy: the sensitive labels.
    subset: ``"all"`` propositions, ``"explicit"`` (stated by the original) or
      ``"implied"`` (entailed but not stated).
  """
  if subset not in SUBSETS:
    raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
  if not isinstance(policy, Policy):
    raise TypeError(f"policy must be a Policy, got {type(policy).__name__}")
  rules = tuple(rules)
  props = horn.forward_chain(original, rules)
  chosen = {"all": props.facts, "explicit": props.base, "implied": props.derived}[subset]
  return confusion(chosen, policy, judge(remaining, rules))


class Scores(NamedTuple):
  """Security and Utility of a pool of texts."""

  security: float
  utility: float


def pooled(confusions: Sequence[Confusion], how: str = "micro") -> Scores:
  """Security and Utility over texts: ``"micro"`` sums the counts, then takes the ratios;
  ``"text"`` takes each text's ratio and averages over the texts where it is defined
  (NaN if none is)."""
  if how not in POOLINGS:
    raise ValueError(f"how must be one of {POOLINGS}, got {how!r}")
  confusions = list(confusions)
  if not confusions:
    raise ValueError("confusions must not be empty")
  if how == "micro":
    total = sum(confusions[1:], confusions[0])
    return Scores(total.security, total.utility)

  def mean(values):
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan

  return Scores(mean(c.security for c in confusions), mean(c.utility for c in confusions))


def mask_keywords(words: Sequence[str], policy: Policy,
                  parse_sentence: Callable[[Sequence[str]], Atom | None],
                  stop: str = fact_texts.STOP, mask: str = MASK_WORD) -> tuple[str, ...]:
  """Keyword masking: the last word before ``stop`` of each sentence stating a sensitive
  fact becomes ``mask``; every other word is kept."""
  def masked(sentence: list[str]) -> list[str]:
    fact = parse_sentence(sentence)
    return sentence[:-1] + [mask] if fact is not None and policy(fact) else sentence

  out: list[str] = []
  cur: list[str] = []
  for w in words:
    if w == stop:
      out += masked(cur) + [stop]
      cur = []
    else:
      cur.append(w)
  out += masked(cur) if cur else []  # an unfinished last sentence
  return tuple(out)


def redaction_step(facts: Sequence[Atom], rules: Sequence[Rule], policy: Policy,
                   prefer: Sequence[str] = ()) -> list[Atom]:
  """One step of adversarial redaction on stated facts; returns the kept ones, in order.

  Drops every sensitive stated fact; then, in the closure of the rest, for every sensitive
  proposition (sorted, so the step is deterministic) drops one base premise of its first
  derivation: the first premise (in :func:`jaxlab.core.horn.explain`'s order) whose
  predicate is earliest in ``prefer``, or the first premise when none is listed. A
  proposition with another derivation that avoids the dropped premises stays entailed,
  which is what a further step (:func:`redact_to_fixpoint`) removes.
  """
  rank = {p: i for i, p in enumerate(prefer)}
  kept = [f for f in dict.fromkeys(facts) if not policy(f)]
  closure = horn.forward_chain(kept, rules)
  drop = set()
  for x in sorted(closure.derived):
    if not policy(x):
      continue
    premises = [p for _, d in horn.explain(closure, x) for p in d.premises if p in closure.base]
    premises = list(dict.fromkeys(premises))
    if premises and not drop.intersection(premises):
      drop.add(min(premises, key=lambda p: rank.get(p[0], len(rank))))
  return [f for f in kept if f not in drop]


def redact_to_fixpoint(facts: Sequence[Atom], rules: Sequence[Rule], policy: Policy,
                       prefer: Sequence[str] = (), max_steps: int = 100
                       ) -> tuple[list[Atom], int]:
  """:func:`redaction_step` until no sensitive proposition is entailed; returns the kept
  facts and the steps taken."""
  facts = list(facts)
  for step in range(max_steps + 1):
    if not any(policy(x) for x in judge(facts, rules)):
      return facts, step
    facts = redaction_step(facts, rules, policy, prefer)
  raise RuntimeError(f"no fixpoint after max_steps={max_steps}")


def rewriter_loss(net, tokens: jax.Array, loss_mask: jax.Array) -> jax.Array:
  """Teacher-forced cross-entropy of the rewriter on the target words and ``EOS`` of rows
  ``BOS text PAD.. SEP target EOS PAD..`` (:func:`fact_texts.encode_pairs`)."""
  return next_token_loss(net, tokens, loss_mask)


def rewrite(net, tok: Tokenizer, texts: Sequence[Sequence[str]], src_len: int,
            max_sentences: int) -> list[tuple[str, ...]]:
  """The rewriter's output for each text: greedy decoding of one ``keep`` / ``drop`` word
  per sentence (up to ``EOS``), then the kept sentences (:func:`fact_texts.apply_decisions`;
  a sentence without a decision is dropped). A text longer than ``src_len`` words keeps
  its first ``src_len``."""
  texts = [tuple(t)[:src_len] for t in texts]
  prompts = fact_texts.encode_pairs(tok, texts, None, src_len, 0).tokens
  gen = decoding.generate(net, jnp.asarray(prompts), jax.random.key(0), max_sentences + 1,
                          temperature=0.0, eos_id=EOS)
  return [fact_texts.apply_decisions(t, fact_texts.decode_words(tok, row))
          for t, row in zip(texts, np.asarray(gen.tokens), strict=True)]


def iterate(redactor: Callable[[list], list], texts: Sequence, passes: int) -> list[list]:
  """``[texts after pass 1, after pass 2, ...]``: ``redactor`` applied to its own output."""
  if not isinstance(passes, int) or passes < 1:
    raise ValueError(f"passes must be an int >= 1, got {passes!r}")
  out, cur = [], list(texts)
  for _ in range(passes):
    cur = list(redactor(cur))
    out.append(cur)
  return out
