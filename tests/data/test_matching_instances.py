"""Matching instances: validity of every family, and the digits family against sklearn."""

import numpy as np
import pytest
from sklearn.datasets import load_digits as sk_load_digits

from jaxlab import matching as M
from jaxlab.data import matching_instances as instances


@pytest.mark.parametrize("family", instances.FAMILIES)
def test_instances_are_valid(family):
  servers, requests, metric = instances.make(family, 40, seed=1)
  c = M.cost_matrix(requests, servers, metric)
  assert c.shape == (40, 40) and np.all(np.isfinite(c)) and np.all(c >= 0)
  if family == "road_graph":  # request and server nodes are distinct graph nodes
    assert c.min() > 0
  with pytest.raises(ValueError, match="family"):
    instances.make("nyc", 10)


def test_digits_l1_are_disjoint_raw_digits():
  servers, requests, metric = instances.make("digits_l1", 300, seed=4)
  raw = sk_load_digits().data
  assert metric == "l1" and servers.shape == requests.shape == (300, 64)
  assert servers.dtype == np.float32
  rows = {r.tobytes(): i for i, r in enumerate(raw.astype(np.float32))}
  s_idx = {rows[r.tobytes()] for r in servers}
  r_idx = {rows[r.tobytes()] for r in requests}
  assert not s_idx & r_idx  # distinct rows of the data set (disjoint halves of a permutation)
  np.testing.assert_array_equal(instances.digits_l1(300, seed=4)[0], servers)  # deterministic
  with pytest.raises(ValueError, match="at most 898"):
    instances.digits_l1(899)


def test_uniform_and_clustered_statistics():
  s, r, metric = instances.uniform(20_000, seed=0)
  assert metric == "euclidean" and s.shape == (20_000, 2)
  # U[0, 1]^2: mean 1/2, variance 1/12 per coordinate
  np.testing.assert_allclose(s.mean(0), 0.5, atol=0.01)
  np.testing.assert_allclose(s.var(0), 1 / 12, atol=0.003)
  # clustered: hot spots drawn first from the seed's generator, then N(centre, s^2 I) with
  # s <= 0.05, so without background a point lies within 3 s = 0.15 of a hot spot with
  # probability >= 1 - exp(-4.5) = 0.989 (Rayleigh tail); all background is U[0, 1]^2 again
  centres = np.random.default_rng(0).random((20, 2))
  c, _, _ = instances.clustered(20_000, seed=0, background=0.0)
  near = np.min(np.linalg.norm(c[:, None] - centres[None], axis=-1), 1) < 0.15
  assert near.mean() > 0.985
  u, _, _ = instances.clustered(20_000, seed=0, background=1.0)
  np.testing.assert_allclose(u.mean(0), 0.5, atol=0.01)
  np.testing.assert_allclose(u.var(0), 1 / 12, atol=0.003)
