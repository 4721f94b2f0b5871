"""CARE's entity reward on hand-built sets with hand-computed values, its matching against
scipy's exact solver, the mask confidence on hand-built masks, the evidence views and the
vote; the region-question data."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from jaxlab.data import region_questions as rq
from jaxlab.vision import care

# compiled once per module and shared by the tests
hungarian = jax.jit(care.hungarian_match)
greedy = jax.jit(care.greedy_match)
reward = jax.jit(care.entity_reward, static_argnames=("matching",))


def _unit(angles_deg):
  a = np.deg2rad(np.asarray(angles_deg, np.float32))
  return jnp.asarray(np.stack([np.cos(a), np.sin(a)], -1))


def test_reward_of_a_perfect_set_is_4_and_permutation_invariant():
  ref = jnp.eye(5)[jnp.array([0, 3, 1])]
  ok = jnp.ones(3, bool)
  r = reward(ref, ok, ref, ok)
  np.testing.assert_allclose([r.total, r.sim, r.count, r.rep, r.format], [4, 1, 1, 1, 1],
                             atol=1e-6)
  # a set of unrelated embeddings, every permutation of it: the same R_sim
  pred = jax.random.normal(jax.random.key(0), (3, 5))
  sims = [float(reward(pred[jnp.array(p)], ok, ref, ok).sim)
          for p in itertools.permutations(range(3))]
  np.testing.assert_allclose(sims, sims[0], atol=1e-6)


def test_greedy_is_worse_than_the_optimal_assignment_on_a_known_case():
  # predictions at 0 and 60 degrees, references at 20 and -40 degrees:
  # greedy takes (0, 20) first (cos 20 = 0.940), then (60, -40): cos 100 = -0.174;
  # the optimum is (0, -40) + (60, 20): cos 40 + cos 40 = 1.532
  pred, ref = _unit([0, 60]), _unit([20, -40])
  ok = jnp.ones(2, bool)
  c = np.cos(np.deg2rad([20, 100, 40]))
  r_opt = reward(pred, ok, ref, ok)
  r_greedy = reward(pred, ok, ref, ok, matching="greedy")
  assert float(r_opt.sim) == pytest.approx((2 * c[2]) / 2, abs=1e-6)
  assert float(r_greedy.sim) == pytest.approx((c[0] + c[1]) / 2, abs=1e-6)
  assert float(r_opt.total) == pytest.approx(3 + c[2], abs=1e-6)
  m = hungarian(care.cosine_similarity(pred, ref), ok, ok)
  assert sorted(zip(m.pred.tolist(), m.ref.tolist(), strict=True)) == [(0, 1), (1, 0)]


def test_counts_repeats_padding_and_format():
  emb = jnp.eye(4)
  ref, rv = emb[jnp.array([0, 1, 0])], jnp.array([True, True, False])  # {0, 1}, one pad
  # predicted [0, 0, 0, 1, 2, 3] all valid: 6 entities (outside 1-5), 2 repeats of 0;
  # matching 0 -> 0 and 1 -> 1: R_sim = 2 / max(6, 2)
  pred, pv = emb[jnp.array([0, 0, 0, 1, 2, 3])], jnp.ones(6, bool)
  r = reward(pred, pv, ref, rv)
  np.testing.assert_allclose([r.sim, r.count, r.rep, r.format], [2 / 6, 0, 1 / 3, 1],
                             atol=1e-6)
  # the padding is ignored even where it repeats or matches
  pv = jnp.array([True, False, False, True, False, False])  # {0, 1}
  r = reward(pred, pv, ref, rv, format_ok=jnp.array(False))
  np.testing.assert_allclose([r.total, r.sim, r.count, r.rep, r.format], [3, 1, 1, 1, 0],
                             atol=1e-6)
  # nothing predicted: R_sim 0, count 0, no repeats
  r = reward(pred, jnp.zeros(6, bool), ref, rv)
  np.testing.assert_allclose([r.sim, r.count, r.rep], [0, 0, 1], atol=1e-6)
  assert int(care.repeat_count(emb[jnp.array([2, 2, 2, 2])], jnp.ones(4, bool))) == 3
  np.testing.assert_array_equal(
      care.count_reward(jnp.arange(7)[:, None] > jnp.arange(6)[None]), [0, 1, 1, 1, 1, 1, 0])
  bs = care.binary_set_reward(jnp.array([[1, 3, 9], [3, 1, 1], [1, 1, 3]]),
                              jnp.array([[True, True, False], [True, True, False]] + [[True] * 3]),
                              jnp.array([[3, 1], [3, 1], [3, 1]]), jnp.ones((3, 2), bool), 10)
  np.testing.assert_array_equal(bs, [1, 1, 0])  # order ignored; a duplicate breaks equality


def test_matching_against_scipy_on_random_padded_batches():
  key = jax.random.key(1)
  p, r, b = 5, 4, 64
  k1, k2, k3 = jax.random.split(key, 3)
  sim = jax.random.uniform(k1, (b, p, r), minval=-1, maxval=1)
  pv = jax.random.bernoulli(k2, 0.7, (b, p))
  rv = jax.random.bernoulli(k3, 0.7, (b, r))
  m = hungarian(sim, pv, rv)  # batched (vmapped) under jit
  mg = greedy(sim, pv, rv)
  got = np.asarray(care.matched_similarity(sim, m))
  got_g = np.asarray(care.matched_similarity(sim, mg))
  worse = 0
  for i in range(b):
    s = np.asarray(sim[i])[np.asarray(pv[i])][:, np.asarray(rv[i])]
    rows, cols = linear_sum_assignment(s, maximize=True)
    best = s[rows, cols].sum()
    assert got[i] == pytest.approx(best, abs=1e-5)
    assert int(m.valid[i].sum()) == min(int(pv[i].sum()), int(rv[i].sum())) == int(
        mg.valid[i].sum())
    assert got_g[i] <= best + 1e-5
    worse += got_g[i] < best - 1e-5
  assert worse > 0  # greedy is suboptimal on some of these


def test_mask_confidence_on_hand_built_masks():
  conf = jax.jit(care.mask_confidence)
  half = jnp.full((6, 6), 0.5)
  binary = (jnp.arange(36).reshape(6, 6) % 3 == 0).astype(jnp.float32)
  mixed = jnp.where(jnp.arange(36).reshape(6, 6) < 18, 0.5, 1.0)  # half undecided
  p = 0.9  # every pixel 0.9: 1 - H(0.9) / log 2
  h = -(p * np.log(p) + (1 - p) * np.log(1 - p)) / np.log(2)
  np.testing.assert_allclose(conf(jnp.stack([half, binary, mixed, jnp.full((6, 6), p)])),
                             [0, 1, 0.5, 1 - h], atol=1e-5)
  np.testing.assert_array_equal(care.confidence_filter(jnp.stack([half, binary, mixed])),
                                [False, True, False])
  np.testing.assert_array_equal(care.confidence_filter(jnp.stack([half, mixed]), 0.49),
                                [False, True])
  with pytest.raises(ValueError, match="mask values"):
    care.mask_confidence(jnp.full((2, 2), 1.5))
  with pytest.raises(ValueError, match="tau"):
    care.confidence_filter(half, 1.5)


def test_evidence_views_and_vote():
  img = jnp.arange(100.0).reshape(10, 10)
  m = jnp.zeros((10, 10)).at[3:6, 6:9].set(1.0)
  crop, masked = jax.jit(care.evidence_views, static_argnums=2)(img, m, 3)
  np.testing.assert_array_equal(crop, img[3:6, 6:9])
  np.testing.assert_array_equal(masked, img[3:6, 6:9])
  # a mask at the border: the centred window is clipped into the image; outside the mask
  # the masked view shows the background
  m2 = jnp.zeros((10, 10)).at[0, 0].set(1.0)
  crop, masked = care.evidence_views(img, m2, 3, background=-7.0)
  np.testing.assert_array_equal(crop, img[:3, :3])
  np.testing.assert_array_equal(masked, jnp.full((3, 3), -7.0).at[0, 0].set(0.0))
  np.testing.assert_allclose(care.mask_centroid(m), [4.0, 7.0])
  np.testing.assert_array_equal(care.mask_window(jnp.stack([m, m2]), 3), [[3, 6], [0, 0]])
  votes = jnp.array([[1, 1, 0], [0, 1, 1], [1, 0, 2], [2, 2, 2], [1, 0, 0], [1, 0, 0]])
  valid = jnp.array([[True] * 3, [True] * 3, [True, False, True], [False] * 3,
                     [True, True, False], [False, True, False]])
  # majority; majority; a tie goes to the earliest valid view; no valid view -> 0;
  # a tie between views 0 and 1 -> view 0's answer; a single valid view
  np.testing.assert_array_equal(jax.jit(care.majority_vote, static_argnums=2)(votes, valid, 3),
                                [1, 1, 1, 0, 1, 0])


def test_bad_input_raises_before_tracing():
  e, v = jnp.eye(3), jnp.ones(3, bool)
  with pytest.raises(ValueError, match="matching"):
    care.entity_reward(e, v, e, v, matching="optimal")
  with pytest.raises(TypeError, match="pred_valid"):
    care.entity_reward(e, jnp.ones(3), e, v)
  with pytest.raises(ValueError, match="pred_emb and ref_emb"):
    care.entity_reward(e, v, jnp.eye(4)[:3], v)
  with pytest.raises(ValueError, match="ref_valid"):
    care.similarity_reward(e, v, e, jnp.ones(2, bool))
  with pytest.raises(ValueError, match="size"):
    care.mask_window(jnp.ones((4, 4)), 5)
  with pytest.raises(ValueError, match="votes and valid"):
    care.majority_vote(jnp.zeros((2, 3), int), jnp.ones((2, 2), bool), 2)
  with pytest.raises(ValueError, match="noise"):
    rq.make_questions(jax.random.key(0), 4, noise=-1.0)


def test_region_questions():
  q = rq.make_questions(jax.random.key(0), 48, noise=0.5)
  q2 = rq.make_questions(jax.random.key(0), 48, noise=0.5)
  np.testing.assert_array_equal(q.images, q2.images)  # same key, same questions
  assert q.images.shape == q.masks.shape == (48, 24, 24)
  np.testing.assert_array_equal(rq.regions_of(q.boxes), q.regions)
  np.testing.assert_array_equal(q.masks.sum((1, 2)), 64)
  np.testing.assert_array_equal(q.answers, np.where(q.attributes == 0, q.digits % 2,
                                                    q.digits > 4))
  assert q.images.min() >= -1 and q.images.max() <= 1 and q.noise.max() <= 0.5
  maps = rq.region_maps(np.array([0, 3]))
  assert maps[0, 0, 0] == 1 and maps[0, 23, 23] == 0 and maps[1, 23, 23] == 1
  assert maps.sum() == 2 * 144
