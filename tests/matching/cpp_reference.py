"""The official C++ sequential push-relabel, restated in plain Python (test reference).

An independent re-statement of ``OnlineDynamicMatching`` in the official code's
``Synthetic/PushRelabel.h`` (github.com/ritesh-777/Incremental-Metric-Bipartite-
Matching-Algorithm), written from its logic, not its text, to check jaxlab's
push-relabel trajectory step by step. Python floats are IEEE doubles, the C++
``Scalar``; duals are Python ints, the C++ ``int``. Followed exactly:

* omega starts at 1 and only doubles;
* euclidean distance: a running sum from 0 of squared coordinate differences,
  then ``sqrt``; ``d_0 = ceil(2 d n / (eps omega))``, ``d_l = ceil(d_{l-1} /
  (2 (1 + eps)^2 n^phi(l-1)))`` recomputed from ``d_0`` at each use;
* a new request's ``y_0 = min(trunc(y_max(0)), min_s int(d_0) + 1 - y_0(s))``;
* the free request ``f`` at level ``l``: if ``y_l(f) >= y_max(l)`` it takes
  ``trunc(y_max(l))`` and moves up (past level ``mu + 1`` the C++ calls
  ``exit(0)``: here :class:`TopLevelReached`); else one scan of the servers in
  index order keeps the minimum slack over eligible servers (free, or held at
  a level ``>= l``), stops at the first admissible free server and remembers
  the first admissible eligible matched one; push to the free one, else to the
  matched one (its holder continues at its own level), else relabel ``y_l(f)
  += int(min slack) + 1``;
* after the insertion the check ``#{level >= l} <= n^(1 - Phi(l))`` for
  ``l = 0 .. max level``; while it fails omega doubles, everything is cleared
  and all requests are re-inserted in arrival order.

Left out: the exact tail (it starts when exactly 50 servers are free, never
for ``n < 50``, and its reload defect is not to be copied) and the timers.
"""

from __future__ import annotations

import copy
import math

import numpy as np


class TopLevelReached(Exception):
  """A request's dual reached ``y_max`` at the top level (the C++ exits there)."""


class CppPushRelabel:
  """Sequential incremental matching as the official C++ runs it (mutable, test-only).

  Args:
    servers: ``(n, dim)`` coordinates (converted to Python floats).
    delta, eps, levels: the C++'s ``delta``, ``epsilon`` and ``mu``.
  """

  def __init__(self, servers, *, delta: float = 0.001, eps: float = 0.2, levels: int = 5):
    self.servers = [tuple(float(c) for c in s) for s in np.asarray(servers, np.float64)]
    self.n = len(self.servers)
    self.delta, self.eps, self.mu = delta, eps, levels
    self.omega = 1.0
    self.restarts = 0  # omega doublings
    self.locations: list[tuple[float, ...]] = []  # inserted requests, arrival order
    self.stats = {"pushes_free": 0, "pushes_matched": 0, "relabels": 0, "moves_up": 0}
    self._clear()

  # -- the state that a doubling clears -----------------------------------------------------
  def _clear(self) -> None:
    big_l = self.mu + 2
    self.y_r: list[list[int]] = []  # per request, a dual per level
    self.level: list[int] = []
    self.y_s = [[0] * self.n for _ in range(big_l)]
    self.holder = [-1] * self.n
    self.placed: list[tuple[float, ...]] = []

  # -- the schedule -------------------------------------------------------------------------
  def _phi(self, i: int) -> float:
    return math.pow(3, i) * (2 * self.delta)

  def _big_phi(self, level: int) -> float:
    return math.ceil(((math.pow(3, level) - 1) / 2) * (2 * self.delta))

  def y_max(self, level: int) -> float:
    return (25 / self.eps) * math.pow(self.n, self._phi(level))

  @staticmethod
  def _distance(a, b) -> float:
    total = 0.0
    for x, y in zip(a, b, strict=True):
      diff = x - y
      total += diff * diff
    return math.sqrt(total)

  def scaled(self, level: int, server: int, loc) -> float:
    if level == 0:
      return math.ceil(2 * self._distance(self.servers[server], loc) * self.n
                       / (self.eps * self.omega))
    divisor = 2 * math.pow(1 + self.eps, 2) * math.pow(self.n, self._phi(level - 1))
    return math.ceil(self.scaled(level - 1, server, loc) / divisor)

  # -- one placement (the C++ match_request_in_state) ---------------------------------------
  def _place(self, loc) -> None:
    f = len(self.placed)
    self.placed.append(loc)
    self.y_r.append([0] * (self.mu + 2))
    self.level.append(0)
    y0 = int(self.y_max(0))
    for s in range(self.n):
      y0 = min(y0, int(self.scaled(0, s, loc)) + 1 - self.y_s[0][s])
    self.y_r[f][0] = y0
    level = 0
    while f != -1:
      if self.y_r[f][level] >= self.y_max(level):
        self.y_r[f][level] = int(self.y_max(level))
        level += 1
        self.stats["moves_up"] += 1
        if level == self.mu + 2:
          raise TopLevelReached(f"request {f} passed level {self.mu + 1}")
        self.level[f] = level
        continue
      free_server, matched_server, min_slack = self._scan(f, level)
      if free_server >= 0:
        self.holder[free_server] = f
        self.y_s[level][free_server] -= 1
        self.stats["pushes_free"] += 1
        f = -1
      elif matched_server >= 0:
        evicted = self.holder[matched_server]
        self.holder[matched_server] = f
        self.y_s[level][matched_server] -= 1
        self.stats["pushes_matched"] += 1
        f, level = evicted, self.level[evicted]
      else:
        self.y_r[f][level] += int(min_slack) + 1
        self.stats["relabels"] += 1

  def _scan(self, f: int, level: int) -> tuple[int, int, float]:
    """(first admissible free server or -1, first admissible eligible matched or -1, min slack)."""
    loc, y_f = self.placed[f], self.y_r[f][level]
    matched_server, min_slack = -1, math.inf
    for s in range(self.n):
      d = self.scaled(level, s, loc)
      h = self.holder[s]
      eligible = h == -1 or level <= self.level[h]
      if eligible:
        min_slack = min(min_slack, d - y_f - self.y_s[level][s])
      if self.y_s[level][s] + y_f == d + 1.0:
        if h == -1:
          return s, matched_server, min_slack
        if eligible and matched_server == -1:
          matched_server = s
    return -1, matched_server, min_slack

  def _valid(self) -> bool:
    top = max(self.level, default=0)
    for level in range(top + 1):
      count = sum(1 for lv in self.level if lv >= level)
      if count > math.pow(self.n, 1 - self._big_phi(level)):
        return False
    return True

  # -- one arrival (the C++ match_request, without the exact tail) ---------------------------
  def insert(self, location) -> None:
    """Inserts one request; on :class:`TopLevelReached` the state is left as before it."""
    loc = tuple(float(c) for c in location)
    saved = copy.deepcopy(self.__dict__)
    try:
      first = True
      while first or not self._valid():
        if not first:
          self.omega *= 2
          self.restarts += 1
          self._clear()
          for old in self.locations:
            self._place(old)
        self._place(loc)
        first = False
    except TopLevelReached:
      self.__dict__.update(saved)
      raise
    self.locations.append(loc)

  # -- views for comparison -----------------------------------------------------------------
  def server_of(self) -> np.ndarray:
    out = np.full(len(self.placed), -1)
    for s, r in enumerate(self.holder):
      if r >= 0:
        out[r] = s
    return out

  def request_duals(self) -> np.ndarray:
    """``(mu + 2, k)`` request duals per level."""
    return np.array(self.y_r, np.int64).T.reshape(self.mu + 2, len(self.placed))

  def server_duals(self) -> np.ndarray:
    return np.array(self.y_s, np.int64)

  def levels(self) -> np.ndarray:
    return np.array(self.level, np.int64)
