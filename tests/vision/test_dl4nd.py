"""DL4ND's pieces against hand-built references: the GMM split on bimodal losses with known
clean and suspect sets, the proxies as per-cell means, the cosine nearest-proxy relabelling
(the sample's own domain excluded in cross-domain mode, only it in within-domain mode)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.vision import dl4nd


def _bimodal(seed=0):
  rng = np.random.default_rng(seed)
  clean = np.abs(rng.normal(0.1, 0.03, 200))
  suspect = rng.normal(2.5, 0.3, 60)
  losses = np.concatenate([clean, suspect])
  is_clean = np.r_[np.ones(200, bool), np.zeros(60, bool)]
  perm = rng.permutation(losses.size)
  return losses[perm], is_clean[perm]


def test_gmm_split_recovers_the_known_clean_and_suspect_sets():
  losses, is_clean = _bimodal()
  split = dl4nd.gmm_split(losses)
  np.testing.assert_array_equal(split.clean, is_clean)
  np.testing.assert_array_equal(split.clean, split.clean_prob > 0.5)
  assert split.means[0] == pytest.approx(losses[is_clean].mean(), abs=1e-3)
  assert split.means[1] == pytest.approx(losses[~is_clean].mean(), abs=1e-3)
  # the low-mean component is the clean one whichever way the mixture labels it; a shift of
  # the losses moves nothing; a threshold near 1 keeps only the surest
  np.testing.assert_array_equal(dl4nd.gmm_split(losses + 3.0, seed=5).clean, is_clean)
  strict = dl4nd.gmm_split(losses, threshold=1 - 1e-12)
  assert strict.clean.sum() <= is_clean.sum() and not np.any(strict.clean & ~is_clean)
  assert np.all(split.clean_prob[is_clean] > 0.99) and np.all(split.clean_prob[~is_clean] < 0.01)
  for bad, match in ((losses[:, None], "1-D"), (np.r_[losses, np.nan], "finite"),
                     (losses[:1], "at least 2")):
    with pytest.raises(ValueError, match=match):
      dl4nd.gmm_split(bad)
  with pytest.raises(ValueError, match="threshold"):
    dl4nd.gmm_split(losses, threshold=1.0)


def test_proxies_are_the_masked_cell_means():
  rng = np.random.default_rng(1)
  n, c, d = 40, 3, 2
  feats = rng.normal(size=(n, 5)).astype(np.float32)
  labels = rng.integers(0, c, n)
  domains = rng.integers(0, d, n)
  mask = rng.random(n) < 0.6
  labels[mask & (labels == 2) & (domains == 1)] = 0  # cell (2, 1) empty among the masked
  p = dl4nd.class_domain_proxies(feats, labels, domains, mask, num_classes=c, num_domains=d)
  assert p.mean.shape == (c, d, 5) and p.count.shape == (c, d)
  for ci in range(c):
    for di in range(d):
      rows = mask & (labels == ci) & (domains == di)
      assert int(p.count[ci, di]) == rows.sum()
      want = feats[rows].mean(0) if rows.any() else np.zeros(5)
      np.testing.assert_allclose(p.mean[ci, di], want, rtol=1e-5, atol=1e-6)
  assert int(p.count[2, 1]) == 0
  with pytest.raises(ValueError, match="labels must be in"):
    dl4nd.class_domain_proxies(feats, labels + 1, domains, mask, num_classes=c, num_domains=d)
  with pytest.raises(ValueError, match="mask"):
    dl4nd.class_domain_proxies(feats, labels, domains, mask.astype(int), num_classes=c,
                               num_domains=d)


def _unit(deg):
  return np.array([np.cos(np.radians(deg)), np.sin(np.radians(deg))], np.float32)


# 3 classes x 3 domains of 2-D proxies, by direction in degrees [class][domain]; cell (1, 2)
# is empty (its direction, 5 deg, would be the nearest to row A); (0, 1) is 10 long, so it is
# the nearest by cosine but not by Euclidean distance for row D
ANGLES = [[0, 120, 240], [60, 10, 5], [180, 300, 20]]
LENGTH = {(0, 1): 10.0}


def _hand_proxies():
  mean = np.stack([[LENGTH.get((c, d), 1.0) * _unit(ANGLES[c][d]) for d in range(3)]
                   for c in range(3)])
  count = np.ones((3, 3), np.int32)
  count[1, 2] = 0
  return dl4nd.Proxies(jnp.asarray(mean, jnp.float32), jnp.asarray(count))


# rows: direction, domain, label, suspect; expected (label, nearest domain) cross and within
ROWS = [(2, 0, 0, True, (1, 1), (0, 0)),     # A: own (0, d0) 2 deg off is excluded in cross
        (25, 2, 0, True, (1, 1), (2, 2)),    # B: (1, d1) 15 deg off; own: (2, d2), not (1, d2)
        (118, 1, 2, False, (2, 0), (2, 1)),  # C: not a suspect, keeps its label
        (130, 0, 1, True, (0, 1), (2, 0))]   # D: (0, d1) 10 deg off (Euclid: (0, d2) / (2, d2))


def test_relabelling_takes_the_nearest_proxy_in_another_or_the_same_domain():
  proxies = _hand_proxies()
  feats = np.stack([_unit(r[0]) for r in ROWS])
  domains, labels, suspect = (np.array([r[i] for r in ROWS]) for i in (1, 2, 3))
  relabel = jax.jit(dl4nd.nearest_proxy_labels, static_argnames="mode")
  for mode, col in (("cross", 4), ("within", 5)):
    new, dom = relabel(feats, labels, domains, suspect, proxies, mode=mode)
    np.testing.assert_array_equal(new, [r[col][0] for r in ROWS])
    np.testing.assert_array_equal(dom, [r[col][1] for r in ROWS])


def test_relabelling_matches_a_brute_force_search_on_random_features():
  rng = np.random.default_rng(2)
  n, c, d, f = 60, 4, 3, 6
  feats = rng.normal(size=(n, f)).astype(np.float32)
  labels, domains = rng.integers(0, c, n), rng.integers(0, d, n)
  suspect = rng.random(n) < 0.5
  mean = rng.normal(size=(c, d, f)).astype(np.float32) * rng.uniform(0.1, 5, (c, d, 1))
  count = (rng.random((c, d)) < 0.8).astype(np.int32)
  proxies = dl4nd.Proxies(jnp.asarray(mean), jnp.asarray(count))
  unit = mean / np.linalg.norm(mean, axis=-1, keepdims=True)
  for mode in dl4nd.MODES:
    new, dom = dl4nd.nearest_proxy_labels(feats, labels, domains, suspect, proxies, mode=mode)
    for i in range(n):
      cos = unit @ feats[i] / np.linalg.norm(feats[i])  # (c, d)
      ok = (count > 0) & ((np.arange(d) != domains[i]) if mode == "cross"
                          else (np.arange(d) == domains[i]))[None]
      if not ok.any():  # no candidate: label kept, domain -1
        assert int(new[i]) == labels[i] and int(dom[i]) == -1
        continue
      ci, di = np.unravel_index(np.argmax(np.where(ok, cos, -np.inf)), (c, d))
      assert int(dom[i]) == di and int(new[i]) == (ci if suspect[i] else labels[i])
      assert (di != domains[i]) if mode == "cross" else (di == domains[i])
  with pytest.raises(ValueError, match="mode"):
    dl4nd.nearest_proxy_labels(feats, labels, domains, suspect, proxies, mode="both")
  with pytest.raises(ValueError, match="columns"):
    dl4nd.nearest_proxy_labels(feats[:, :5], labels, domains, suspect, proxies)


def test_relabel_pipeline_fixes_the_flipped_rows_of_a_clean_two_domain_toy():
  # two domains, two classes: class c lies along direction c (plus a domain offset); rows
  # 0-3 of each domain are flipped and have high loss
  rng = np.random.default_rng(0)
  n = 40
  true = np.tile(np.r_[np.zeros(n // 2, int), np.ones(n // 2, int)], 2)
  domain = np.repeat([0, 1], n)
  base = np.stack([np.eye(2, dtype=np.float32)[t] for t in true]) * 3
  feats = base + 0.1 * rng.normal(size=base.shape).astype(np.float32) + 0.5 * domain[:, None]
  noisy = true.copy()
  flip = np.zeros(2 * n, bool)
  flip[[0, 1, 2, 3, n, n + 1, n + 30, n + 31]] = True
  noisy[flip] = 1 - noisy[flip]
  losses = np.where(flip, 3.0, 0.05) + 0.01 * rng.random(2 * n)
  out = dl4nd.relabel(feats, losses, noisy, domain, num_classes=2, num_domains=2)
  np.testing.assert_array_equal(out.clean, ~flip)
  np.testing.assert_array_equal(out.labels, true)
  # clean rows per (class, domain): d0 lost 4 of class 0; d1 lost 2 of each class
  np.testing.assert_array_equal(out.proxies.count, [[16, 18], [20, 18]])
  with pytest.raises(ValueError, match="proxy_set"):
    dl4nd.relabel(feats, losses, noisy, domain, num_classes=2, num_domains=2, proxy_set="x")
  with pytest.raises(ValueError, match="mode"):
    dl4nd.relabel(feats, losses, noisy, domain, num_classes=2, num_domains=2, mode="x")
  with pytest.raises(ValueError, match="losses"):
    dl4nd.relabel(feats, losses[:-1], noisy, domain, num_classes=2, num_domains=2)


def test_classifier_bad_input_raises_before_tracing():
  with pytest.raises(ValueError, match="hidden"):
    dl4nd.ClassifierConfig(hidden=())
  with pytest.raises(ValueError, match="learning_rate"):
    dl4nd.ClassifierConfig(learning_rate=0.0)
  net = dl4nd.create_classifier(jax.random.key(0), dl4nd.ClassifierConfig(hidden=(4, 3)))
  x = np.zeros((5, 64), np.float32)
  assert dl4nd.features(net, x).shape == (5, 3)
  with pytest.raises(ValueError, match="labels must be in"):
    dl4nd.train(net, jax.random.key(1), x, np.full(5, 10), 1)
  with pytest.raises(ValueError, match="labels must have shape"):
    dl4nd.per_sample_losses(net, x, np.zeros(4, int))
  with pytest.raises(ValueError, match="num_steps"):
    dl4nd.train(net, jax.random.key(1), x, np.zeros(5, int), 0)
