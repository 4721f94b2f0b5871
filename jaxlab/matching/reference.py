"""Exact offline minimum-cost matching through scipy (the reference solver).

References:
  Crouse, "On implementing 2D rectangular assignment algorithms", IEEE TAES
  2016 (``scipy.optimize.linear_sum_assignment``).
"""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.spatial.distance

METRICS = ("euclidean", "l1", "precomputed")


def check_metric(metric: str) -> None:
  if metric not in METRICS:
    raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")


def cost_matrix(requests, servers, metric: str) -> np.ndarray:
  """Distances ``(len(requests), num_servers)`` in float64.

  For ``"precomputed"``, ``servers`` is the distance matrix (rows = possible
  requests, columns = servers) and ``requests`` are row indices.
  """
  check_metric(metric)
  if metric == "precomputed":
    d = np.asarray(servers, np.float64)
    return d[np.asarray(requests, np.int64)]
  r = np.asarray(requests, np.float64)
  s = np.asarray(servers, np.float64)
  return scipy.spatial.distance.cdist(r, s, "euclidean" if metric == "euclidean" else "cityblock")


def optimal_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Rows and columns of a minimum-cost assignment of every row (rows <= cols).

  Args:
    cost: a finite ``(num_rows, num_cols)`` matrix with ``num_rows <= num_cols``.

  Returns:
    ``(rows, cols)`` as ``scipy.optimize.linear_sum_assignment`` returns them.
  """
  cost = np.asarray(cost, np.float64)
  if cost.ndim != 2:
    raise ValueError(f"cost must be a 2-D matrix, got shape {cost.shape}")
  if cost.shape[0] > cost.shape[1]:
    raise ValueError(f"cost must have at most as many rows as columns, got {cost.shape}")
  if not np.all(np.isfinite(cost)):
    raise ValueError("cost must be finite")
  return scipy.optimize.linear_sum_assignment(cost)


def optimal_cost(requests, servers, metric: str = "euclidean") -> float:
  """The optimum cost of matching every request to a distinct server."""
  c = cost_matrix(requests, servers, metric)
  if c.shape[0] == 0:
    return 0.0
  rows, cols = optimal_assignment(c)
  return float(c[rows, cols].sum())


def incremental_exact_numpy(requests, servers, metric: str = "euclidean") -> np.ndarray:
  """Plain-numpy incremental exact matching: the anchor for ``algorithm="exact"``.

  The same shortest-augmenting-path step (Dijkstra on reduced costs with
  Jonker-Volgenant lazy potentials) as :func:`jaxlab.matching.exact.insert_exact`,
  one request at a time, vectorized over servers with numpy in float64.

  Returns:
    ``server_of``: the server of each request (an optimal assignment).
  """
  check_metric(metric)
  if metric == "precomputed":
    matrix = np.asarray(servers, np.float64)
    n = matrix.shape[1]
    row_cost = lambda i: matrix[requests[i]]
  else:
    s = np.asarray(servers, np.float64)
    r = np.asarray(requests, np.float64)
    n = len(s)
    if metric == "l1":
      row_cost = lambda i: np.abs(s - r[i]).sum(1)
    else:
      row_cost = lambda i: np.sqrt(((s - r[i]) ** 2).sum(1))
  k = len(requests)
  u, v = np.zeros(k), np.zeros(n + 1)
  p = np.full(n + 1, -1)  # request held by each column; column n is virtual
  for i in range(k):
    p[n] = i
    dist = np.full(n + 1, np.inf)
    dist[n] = 0.0
    way = np.full(n + 1, n)
    used = np.zeros(n + 1, bool)
    j0 = n
    while True:
      used[j0] = True
      i0 = p[j0]
      cur = dist[j0] + row_cost(i0) - u[i0] - v[:n]
      better = ~used[:n] & (cur < dist[:n])
      dist[:n][better] = cur[better]
      way[:n][better] = j0
      j0 = int(np.argmin(np.where(used, np.inf, dist)))
      if p[j0] < 0:
        break
    shift = np.where(used, dist[j0] - dist, 0.0)
    v -= shift
    np.add.at(u, p[used], shift[used])
    while j0 != n:
      j1 = way[j0]
      p[j0] = p[j1]
      j0 = j1
  server_of = np.full(k, -1)
  matched = p[:n] >= 0
  server_of[p[:n][matched]] = np.nonzero(matched)[0]
  return server_of
