r"""Rendered fact texts whose Horn rules imply facts no sentence states (RedacBench's test bed).

A text is a short list of sentences ``subject predicate object .``, each stating one
ground fact of a small world of people, companies, cities, clinics and conditions:

==============  ======================  =============================================
predicate       arguments               meaning
==============  ======================  =============================================
``works_at``    person, company         employment (non-sensitive)
``located``     company, city           where a company's office is (non-sensitive)
``treated_at``  person, clinic          a clinic visit (non-sensitive under the policy)
``treats``      clinic, condition       a clinic's specialty (non-sensitive)
``married``     person, person          marriage (non-sensitive)
``lives_in``    person, city            a home city, stated (sensitive)
``diagnosed``   person, condition       a diagnosis, stated (sensitive)
==============  ======================  =============================================

:data:`RULES` (Horn clauses for :func:`jaxlab.core.horn.forward_chain`) imply facts that
no sentence states:

.. math::
  \mathrm{in\_city}(p, t) &\leftarrow \mathrm{works\_at}(p, c) \wedge \mathrm{located}(c, t) \\
  \mathrm{in\_city}(p, t) &\leftarrow \mathrm{lives\_in}(p, t) \\
  \mathrm{in\_city}(p, t) &\leftarrow \mathrm{married}(p, q) \wedge \mathrm{lives\_in}(q, t) \\
  \mathrm{has\_condition}(p, d) &\leftarrow \mathrm{treated\_at}(p, k) \wedge
      \mathrm{treats}(k, d) \\
  \mathrm{has\_condition}(p, d) &\leftarrow \mathrm{diagnosed}(p, d) \\
  \mathrm{married}(q, p) &\leftarrow \mathrm{married}(p, q), \qquad
  \mathrm{employs}(c, p) \leftarrow \mathrm{works\_at}(p, c)

and :data:`SENSITIVE` (the policy: a person's whereabouts and health) marks ``lives_in``,
``in_city``, ``diagnosed`` and ``has_condition`` sensitive. Masking the keyword of
``p lives_in t .`` therefore leaves ``in_city(p, t)`` inferable whenever ``p`` works at a
company located in ``t`` or is married to someone living there: the failure RedacBench
measures.

Texts are generated host-side (:func:`sample_texts`, a numpy generator seeded from the
key); :func:`render` / :func:`parse` map facts to words and back (a sentence with an
unknown or masked word, or of the wrong shape, states nothing), and :func:`encode_pairs`
makes fixed-shape rows ``BOS text PAD.. SEP target EOS PAD..`` for a decoder-only rewriter
(sources right-padded so every row's prompt has the same length and sentence ``i`` the
same positions), and :func:`decisions` / :func:`apply_decisions` give the deletion-only
rewrite as one ``keep`` / ``drop`` word per sentence.

Example:
  >>> texts = sample_texts(jax.random.key(0), 4)
  >>> " ".join(texts[0])                     # 'p3 works_at c1 . c1 located t2 . ...'
  >>> facts = parse(texts[0])                # {("works_at", "p3", "c1"), ...}
  >>> closure = horn.forward_chain(facts, RULES)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import jax
import numpy as np

from jaxlab.core.horn import Atom, Rule
from jaxlab.data.lm_tasks import BOS, EOS, PAD, SEP, SeqData, Tokenizer

NUM = {"person": 8, "company": 6, "city": 6, "clinic": 4, "condition": 4}
PREFIX = {"person": "p", "company": "c", "city": "t", "clinic": "k", "condition": "d"}
# predicate -> (subject type, object type); the stated (base) predicates
PREDICATES = {"works_at": ("person", "company"), "located": ("company", "city"),
              "treated_at": ("person", "clinic"), "treats": ("clinic", "condition"),
              "married": ("person", "person"), "lives_in": ("person", "city"),
              "diagnosed": ("person", "condition")}
DERIVED = {"in_city": ("person", "city"), "has_condition": ("person", "condition"),
           "employs": ("company", "person")}
SENSITIVE = frozenset({"lives_in", "in_city", "diagnosed", "has_condition"})
STOP = "."
KEEP, DROP = "keep", "drop"  # a rewriter's per-sentence decisions

RULES = (
    Rule("work_city", ("in_city", "?p", "?t"), (("works_at", "?p", "?c"), ("located", "?c", "?t"))),
    Rule("home_city", ("in_city", "?p", "?t"), (("lives_in", "?p", "?t"),)),
    Rule("spouse_city", ("in_city", "?p", "?t"), (("married", "?p", "?q"),
                                                  ("lives_in", "?q", "?t"))),
    Rule("clinic_condition", ("has_condition", "?p", "?d"),
         (("treated_at", "?p", "?k"), ("treats", "?k", "?d"))),
    Rule("diagnosis", ("has_condition", "?p", "?d"), (("diagnosed", "?p", "?d"),)),
    Rule("married_sym", ("married", "?q", "?p"), (("married", "?p", "?q"),)),
    Rule("employs", ("employs", "?c", "?p"), (("works_at", "?p", "?c"),)),
)


def entities(kind: str) -> tuple[str, ...]:
  """The entity names of a type (``"person"`` -> ``("p0", ..., "p7")``)."""
  if kind not in NUM:
    raise ValueError(f"kind must be one of {tuple(NUM)}, got {kind!r}")
  return tuple(f"{PREFIX[kind]}{i}" for i in range(NUM[kind]))


def tokenizer() -> Tokenizer:
  """Words: the stated predicates, ``"."``, ``keep``, ``drop``, then every entity name."""
  words = (*PREDICATES, STOP, KEEP, DROP, *(e for kind in NUM for e in entities(kind)))
  return Tokenizer(words)


def render(facts: Iterable[Atom]) -> tuple[str, ...]:
  """Words of the sentences ``s pred o .`` of ``facts`` (binary, stated predicates), in order."""
  words: list[str] = []
  for f in facts:
    if len(f) != 3 or f[0] not in PREDICATES:
      raise ValueError(f"facts must be (predicate, subject, object) with a stated predicate "
                       f"{tuple(PREDICATES)}, got {f!r}")
    words += [f[1], f[0], f[2], STOP]
  return tuple(words)


def sentences(words: Sequence[str]) -> list[tuple[str, ...]]:
  """``words`` split after each ``"."`` (the stop dropped; a trailing unfinished one kept)."""
  out, cur = [], []
  for w in words:
    if w == STOP:
      out.append(tuple(cur))
      cur = []
    else:
      cur.append(w)
  if cur:
    out.append(tuple(cur))
  return out


def _typed(word: str, kind: str) -> bool:
  return word in _ENTITY_SETS[kind]


def parse_sentence(sentence: Sequence[str]) -> Atom | None:
  """The fact a sentence ``(s, pred, o)`` states, or None (masked, unknown, ill-typed)."""
  if len(sentence) != 3:
    return None
  s, p, o = sentence
  if p not in PREDICATES:
    return None
  ts, to = PREDICATES[p]
  if not (_typed(s, ts) and _typed(o, to)):
    return None
  return (p, s, o)


def parse(words: Sequence[str]) -> list[Atom]:
  """The facts a text states, in order, duplicates dropped (what the judge reads)."""
  facts = [parse_sentence(s) for s in sentences(words)]
  return list(dict.fromkeys(f for f in facts if f is not None))


_ENTITY_SETS = {kind: frozenset(entities(kind)) for kind in NUM}


def sample_facts(rng: np.random.Generator, people: int = 3, p_lives: float = 0.5,
                 p_treated: float = 0.5, p_diagnosed: float = 0.3, p_married: float = 0.4,
                 p_located: float = 0.7, p_treats: float = 0.7) -> list[Atom]:
  """One text's facts (shuffled): ``people`` distinct persons, each working at a company;
  each stated relation drawn with its probability; a married pair with ``p_married``."""
  ps = rng.choice(NUM["person"], people, replace=False)
  names = {k: entities(k) for k in NUM}
  facts: list[Atom] = []
  companies, clinics = [], []
  for p in ps:
    person = names["person"][p]
    c = names["company"][rng.integers(NUM["company"])]
    companies.append(c)
    facts.append(("works_at", person, c))
    if rng.random() < p_lives:
      facts.append(("lives_in", person, names["city"][rng.integers(NUM["city"])]))
    if rng.random() < p_treated:
      k = names["clinic"][rng.integers(NUM["clinic"])]
      clinics.append(k)
      facts.append(("treated_at", person, k))
    if rng.random() < p_diagnosed:
      facts.append(("diagnosed", person, names["condition"][rng.integers(NUM["condition"])]))
  if people >= 2 and rng.random() < p_married:
    a, b = rng.choice(ps, 2, replace=False)
    facts.append(("married", names["person"][a], names["person"][b]))
  for c in dict.fromkeys(companies):
    if rng.random() < p_located:
      facts.append(("located", c, names["city"][rng.integers(NUM["city"])]))
  for k in dict.fromkeys(clinics):
    if rng.random() < p_treats:
      facts.append(("treats", k, names["condition"][rng.integers(NUM["condition"])]))
  order = rng.permutation(len(facts))
  return [facts[i] for i in order]


def sample_texts(key: jax.Array, num: int, min_people: int = 2, max_people: int = 3,
                 **probs) -> list[tuple[str, ...]]:
  """``num`` rendered texts (tuples of words), each of ``min_people..max_people`` persons
  (uniform); ``probs`` are :func:`sample_facts`'s probabilities. Same key, same texts."""
  if not isinstance(num, int) or num < 1:
    raise ValueError(f"num must be an int >= 1, got {num!r}")
  if not (isinstance(min_people, int) and isinstance(max_people, int)
          and 1 <= min_people <= max_people <= NUM["person"]):
    raise ValueError(f"need 1 <= min_people <= max_people <= {NUM['person']}, got "
                     f"{min_people!r}, {max_people!r}")
  seed = np.asarray(jax.random.key_data(key)).astype(np.uint64).tolist()
  rng = np.random.default_rng(seed)
  return [render(sample_facts(rng, int(rng.integers(min_people, max_people + 1)), **probs))
          for _ in range(num)]


def max_sentences(people: int = 3) -> int:
  """The most sentences a text of ``people`` persons can have."""
  return 4 * people + 1 + 2 * people


def max_words(people: int = 3) -> int:
  """The most words a text of ``people`` persons can have (4 per sentence)."""
  return 4 * max_sentences(people)


def encode_pairs(tok: Tokenizer, sources: Sequence[Sequence[str]],
                 targets: Sequence[Sequence[str]] | None, src_len: int, tgt_len: int) -> SeqData:
  """Rows ``BOS source PAD.. SEP target EOS PAD..`` of length ``src_len + tgt_len + 3``.

  The source is right-padded to ``src_len`` words, so word ``j`` of every source sits at
  position ``1 + j`` (sentence ``i`` of a rendered text at ``1 + 4 i``) and every prompt
  ``BOS source PAD.. SEP`` has ``prompt_len = src_len + 2`` tokens (generation starts at one
  position for all rows); the target is right-padded to ``tgt_len`` words after its
  ``EOS``. ``loss_mask`` marks the target's words and its ``EOS``. ``targets=None`` gives
  prompts only (``(N, src_len + 2)``).
  """
  n = len(sources)
  if targets is not None and len(targets) != n:
    raise ValueError(f"sources and targets must have the same length, got {n} and "
                     f"{len(targets)}")
  width = src_len + 2 + (0 if targets is None else tgt_len + 1)
  rows = np.full((n, width), PAD, np.int32)
  mask = np.zeros((n, width - 1), np.float32)
  rows[:, 0] = BOS
  rows[:, src_len + 1] = SEP
  for i, src in enumerate(sources):
    if len(src) > src_len:
      raise ValueError(f"sources[{i}] has {len(src)} words > src_len={src_len}")
    rows[i, 1: 1 + len(src)] = tok.encode(" ".join(src)) if len(src) else []
    if targets is not None:
      tgt = targets[i]
      if len(tgt) > tgt_len:
        raise ValueError(f"targets[{i}] has {len(tgt)} words > tgt_len={tgt_len}")
      start = src_len + 2
      rows[i, start: start + len(tgt)] = tok.encode(" ".join(tgt)) if len(tgt) else []
      rows[i, start + len(tgt)] = EOS
      mask[i, start - 1: start + len(tgt)] = 1.0  # positions predicting the target and EOS
  return SeqData(rows, mask, src_len + 2)


def decisions(words: Sequence[str], kept: Iterable[Atom]) -> tuple[str, ...]:
  """One ``keep`` / ``drop`` word per sentence of ``words``: keep iff its fact is in
  ``kept`` (a sentence stating nothing is dropped)."""
  kept = set(kept)
  return tuple(KEEP if parse_sentence(s) in kept else DROP for s in sentences(words))


def apply_decisions(words: Sequence[str], decided: Sequence[str]) -> tuple[str, ...]:
  """The sentences of ``words`` whose decision is ``keep``; a sentence past the end of
  ``decided`` (or with any other word) is dropped."""
  out: list[str] = []
  for i, s in enumerate(sentences(words)):
    if i < len(decided) and decided[i] == KEEP:
      out += [*s, STOP]
  return tuple(out)


def decode_words(tok: Tokenizer, ids) -> tuple[str, ...]:
  """Generated ids to words, stopping at the first ``EOS``; ``PAD`` is dropped, other
  specials are kept as words (so a stray one breaks its sentence rather than vanishing)."""
  out = []
  for i in np.asarray(ids).reshape(-1).tolist():
    if i == EOS:
      break
    if i == PAD:
      continue
    out.append(tok.words[i])
  return tuple(out)
