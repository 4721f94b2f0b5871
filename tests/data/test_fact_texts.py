"""Fact texts: render / parse round trips, the row layout, keep/drop decisions, determinism."""

import jax
import numpy as np
import pytest

from jaxlab.core import horn
from jaxlab.data import fact_texts as ft
from jaxlab.data.lm_tasks import BOS, EOS, PAD, SEP


def test_render_parse_round_trip_and_broken_sentences():
  facts = [("works_at", "p0", "c1"), ("located", "c1", "t2"), ("married", "p0", "p3")]
  words = ft.render(facts)
  assert " ".join(words) == "p0 works_at c1 . c1 located t2 . p0 married p3 ."
  assert ft.parse(words) == facts
  # masked, ill-typed, wrong-length and unknown sentences state nothing
  assert ft.parse(("p0", "works_at", "<mask>", ".", "c1", "works_at", "c1", ".",
                   "p0", "works_at", ".", "p0", "flies_to", "t1", ".")) == []
  with pytest.raises(ValueError, match="stated predicate"):
    ft.render([("in_city", "p0", "t1")])


def test_sample_texts_are_deterministic_and_well_formed():
  a = ft.sample_texts(jax.random.key(3), 20)
  assert a == ft.sample_texts(jax.random.key(3), 20)
  assert a != ft.sample_texts(jax.random.key(4), 20)
  for words in a:
    facts = ft.parse(words)
    assert len(facts) * 4 == len(words) <= ft.max_words(3)
    people = {f[1] for f in facts if f[0] == "works_at"}
    assert 2 <= len(people) <= 3
    closure = horn.forward_chain(facts, ft.RULES)
    assert all(("employs", f[2], f[1]) in closure.facts for f in facts if f[0] == "works_at")
  with pytest.raises(ValueError, match="num must be"):
    ft.sample_texts(jax.random.key(0), 0)
  with pytest.raises(ValueError, match="min_people"):
    ft.sample_texts(jax.random.key(0), 2, min_people=3, max_people=2)


def test_encode_pairs_layout_and_decisions():
  tok = ft.tokenizer()
  text = ft.render([("works_at", "p0", "c0"), ("lives_in", "p0", "t1")])
  target = ft.decisions(text, [("works_at", "p0", "c0")])
  assert target == ("keep", "drop")
  assert ft.apply_decisions(text, target) == text[:4]
  assert ft.apply_decisions(text, ("keep",)) == text[:4]  # no decision: dropped
  data = ft.encode_pairs(tok, [text], [target], 10, 3)
  row = np.asarray(data.tokens[0])
  assert row.shape == (16,) and data.prompt_len == 12
  assert row[0] == BOS and row[11] == SEP and list(row[9:11]) == [PAD, PAD]
  assert tok.decode(row[1:9]) == " ".join(text)
  assert tok.decode(row[12:14]) == "keep drop" and row[14] == EOS and row[15] == PAD
  assert list(np.nonzero(data.loss_mask[0])[0]) == [11, 12, 13]  # predict keep, drop, EOS
  assert ft.decode_words(tok, row[12:]) == ("keep", "drop")
  with pytest.raises(ValueError, match="src_len"):
    ft.encode_pairs(tok, [text], None, 4, 0)
