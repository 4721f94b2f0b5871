"""Offline instances of incremental metric matching, standing in for the paper's four datasets.

Each generator returns ``(servers, requests, metric)`` ready for
:func:`jaxlab.matching.init` / ``insert``: coordinates for "euclidean" and "l1",
or a ``(num_requests, n)`` shortest-path distance matrix with row indices for
"precomputed". All are generated locally (no download).

* :func:`uniform`: uniform points in the unit square (the paper's synthetic set);
* :func:`clustered`: a Gaussian mixture of hot spots over a faint uniform
  background (a taxi-like city, standing in for NYC taxi pickups);
* :func:`digits_l1`: scikit-learn's bundled 8x8 digits, 64-D L1 (the MNIST case);
* :func:`road_graph`: shortest-path distances on a random geometric graph
  (k nearest neighbours in the unit square, Euclidean edge lengths) through
  ``scipy.sparse.csgraph`` (standing in for the Beijing road network).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import scipy.spatial

from jaxlab.data.digits import load_digits

FAMILIES = ("uniform", "clustered", "digits_l1", "road_graph")


def uniform(n: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  return rng.random((n, 2)).astype(np.float32), rng.random((n, 2)).astype(np.float32), "euclidean"


def clustered(n: int, seed: int = 0, num_hotspots: int = 20, background: float = 0.1):
  rng = np.random.default_rng(seed)
  centers = rng.random((num_hotspots, 2))
  scales = rng.uniform(0.01, 0.05, num_hotspots)
  weights = rng.dirichlet(np.ones(num_hotspots))

  def sample(m):
    k = rng.choice(num_hotspots, m, p=weights)
    pts = centers[k] + scales[k, None] * rng.standard_normal((m, 2))
    bg = rng.random(m) < background
    pts[bg] = rng.random((bg.sum(), 2))
    return pts.astype(np.float32)

  return sample(n), sample(n), "euclidean"


def digits_l1(n: int, seed: int = 0):
  """Disjoint random halves of the 1,797 digits (n <= 898), pixel values 0..16."""
  x = load_digits("pixels").x
  if n > len(x) // 2:
    raise ValueError(f"n must be at most {len(x) // 2} for digits_l1, got {n}")
  perm = np.random.default_rng(seed).permutation(len(x))
  return x[perm[:n]], x[perm[n:2 * n]], "l1"


def road_graph(n: int, seed: int = 0, k: int = 6):
  """Shortest-path distances between request and server nodes of a k-NN graph."""
  rng = np.random.default_rng(seed)
  num_nodes = 3 * n
  pts = rng.random((num_nodes, 2))
  dist, nbr = scipy.spatial.cKDTree(pts).query(pts, k + 1)
  rows = np.repeat(np.arange(num_nodes), k)
  graph = scipy.sparse.csr_matrix((dist[:, 1:].ravel(), (rows, nbr[:, 1:].ravel())),
                                  shape=(num_nodes, num_nodes))
  graph = graph.maximum(graph.T)  # undirected roads
  _, labels = scipy.sparse.csgraph.connected_components(graph, directed=False)
  giant = np.nonzero(labels == np.bincount(labels).argmax())[0]
  if len(giant) < 2 * n:
    raise ValueError("the road graph's giant component is too small; use another seed")
  nodes = rng.permutation(giant)[: 2 * n]
  servers, requests = nodes[:n], nodes[n:]
  d = scipy.sparse.csgraph.dijkstra(graph, directed=False, indices=servers)  # (n, V)
  matrix = d[:, requests].T.astype(np.float32)  # rows = requests, columns = servers
  return matrix, np.arange(n, dtype=np.int32), "precomputed"


def make(family: str, n: int, seed: int = 0):
  """``(servers, requests, metric)`` of one instance of ``family``."""
  if family not in FAMILIES:
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
  return {"uniform": uniform, "clustered": clustered, "digits_l1": digits_l1,
          "road_graph": road_graph}[family](n, seed)
