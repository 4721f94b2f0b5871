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
