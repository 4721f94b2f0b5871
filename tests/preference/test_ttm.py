"""Test-Time Matching metrics and loop: hand-made groups, chance levels, the schedule."""

import math
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.preference import ttm


def test_scores_on_hand_made_groups():
  # Image 0 prefers caption 1 (text fails), but the identity still has the larger total.
  s = jnp.array([[0.5, 0.6], [0.0, 0.9]])
  assert not bool(ttm.text_score(s)) and bool(ttm.image_score(s))
  assert not bool(ttm.group_score(s)) and bool(ttm.group_match(s))
  good = jnp.array([[0.9, 0.1], [0.2, 0.8]])
  assert bool(ttm.group_score(good)) and bool(ttm.group_match(good))
  tie = jnp.ones((2, 2))  # bag-of-words: both pairings score the same: neither metric
  assert not bool(ttm.group_score(tie)) and not bool(ttm.group_match(tie))
  batch = jnp.stack([s, good, tie])
  np.testing.assert_array_equal(ttm.group_match(batch), [True, True, False])
  np.testing.assert_array_equal(jax.jit(ttm.group_score)(batch), [False, True, False])


def _exact_group_score_chance(k: int) -> float:
  """P(a uniform ranking of the k^2 entries puts every d_i above its off-diagonal cross)."""
  total_off = k * (k - 1)

  @cache
  def prob(mask: int, placed_off: int) -> float:
    n = bin(mask).count("1")
    if n == k and placed_off == total_off:
      return 1.0
    remaining = (k - n) + (total_off - placed_off)
    allowed = n * (n - 1) - placed_off  # off-diagonal entries whose row and column are placed
    p = allowed / remaining * prob(mask, placed_off + 1) if allowed else 0.0
    return p + sum(prob(mask | 1 << i, placed_off) / remaining for i in range(k)
                   if not mask >> i & 1)

  return prob(0, 0)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_chance_levels(k):
  assert ttm.group_score_chance(k) == pytest.approx(_exact_group_score_chance(k), rel=1e-12)
  assert ttm.group_match_chance(k) == pytest.approx(1 / math.factorial(k))
  # both rates in one compiled program (op by op, each jnp operation compiles on its own)
  rates = jax.jit(lambda key: [m(jax.random.normal(key, (100_000, k, k))).mean()
                               for m in (ttm.group_score, ttm.group_match)])(jax.random.key(k))
  for p, chance in zip(rates, (ttm.group_score_chance(k), ttm.group_match_chance(k)), strict=True):
    p = float(p)
    assert abs(p - chance) < 5 * math.sqrt(chance * (1 - chance) / 100_000) + 1e-4


def test_group_match_assignment_path_agrees_with_enumeration():
  rng = np.random.default_rng(0)
  s = rng.normal(size=(40, 7, 7))
  s[:20] += 3 * np.eye(7)  # half the groups clearly correct
  totals = np.array([[blk[np.arange(7), p].sum() for p in ttm._permutations(7)] for blk in s])
  expected = totals[:, 0] > totals[:, 1:].max(axis=1)
  np.testing.assert_array_equal(ttm.group_match(s), expected)
  assert expected[:20].all()
  # a tie with another assignment is not a match, on both paths: swapping captions 0 and 1
  # of a diagonal-dominant group scores the same when s[0,1] + s[1,0] = s[0,0] + s[1,1]
  for k in (3, 7):
    tie = 2 * np.eye(k)
    tie[0, 1] = tie[1, 0] = 1.0
    tie[0, 0] = tie[1, 1] = 1.0
    assert not bool(ttm.group_match(tie[None])[0]), k
    tie[0, 0] += 1e-3  # the identity now wins by a hair
    assert bool(ttm.group_match(tie[None])[0]), k


def test_pseudo_match_two_by_two_is_the_official_rule():
  s = jnp.array([[[1.0, 0.0], [0.0, 1.0]],     # m = 2: identity
                 [[0.0, 0.7], [0.6, 0.0]],     # m = -1.3: swap
                 [[0.3, 0.2], [0.0, 0.1]]])    # m = 0.2: below the threshold
  out = ttm.pseudo_match(s, 0.5)
  np.testing.assert_array_equal(out.permutation, [[0, 1], [1, 0], [0, 1]])
  np.testing.assert_allclose(out.margin, [2.0, 1.3, 0.2], rtol=1e-6)
  np.testing.assert_array_equal(out.selected, [True, True, False])


def test_threshold_schedule_and_bad_input():
  assert ttm.threshold_schedule(0, 10) == 1.0 and ttm.threshold_schedule(9, 10) == 0.0
  assert ttm.threshold_schedule(3, 7) == pytest.approx(0.5)
  assert ttm.threshold_schedule(1, 5, kind="linear") == pytest.approx(0.75)
  with pytest.raises(ValueError, match="kind"):
    ttm.threshold_schedule(0, 3, kind="step")
  with pytest.raises(ValueError, match="shape"):
    ttm.group_score(jnp.zeros((2, 3)))
  with pytest.raises(TypeError, match="floating"):
    ttm.group_match(jnp.zeros((2, 2), jnp.int32))
  with pytest.raises(ValueError, match="k must be"):
    ttm.pseudo_match(jnp.zeros((7, 7)), 0.0)


def test_loop_self_trains_a_toy_model():
  """A model whose pairwise scores are w * true + noise: fine-tuning on pseudo-labels
  (here: raising w where the kept pseudo-label is the identity) improves group match."""
  key = jax.random.key(0)
  true = jnp.tile(jnp.eye(2), (300, 1, 1))
  noise = jax.random.normal(key, (300, 2, 2))

  def similarity(w, groups):
    return w * groups + noise

  def finetune(w, groups, match, r):
    ident = jnp.all(match.permutation == jnp.arange(2), -1)
    return w + 0.5 * (jnp.mean(jnp.where(match.selected, 2.0 * ident - 1.0, 0.0)))

  w, hist = ttm.test_time_matching(
      0.3, true, similarity_fn=similarity, finetune_fn=finetune, iterations=5,
      callback=lambda r, w: {"group_match": float(ttm.group_match(similarity(w, true)).mean())})
  assert [h["threshold"] for h in hist] == pytest.approx([1.0, 0.8535534, 0.5, 0.1464466, 0.0])
  assert hist[-1]["group_match"] > float(ttm.group_match(similarity(0.3, true)).mean())
  assert w > 0.3
