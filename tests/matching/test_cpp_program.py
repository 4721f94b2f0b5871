"""The C++ program that experiments.bench_matching times is the official sequential algorithm.

``experiments/cpp/push_relabel.cpp`` (both its modes: the official data
structures, and flat arrays) must end every instance in exactly the state of
:class:`cpp_reference.CppPushRelabel`, the plain-Python restatement of the
official C++ code, with the same numbers of pushes, relabels and level moves
(so the timed program does the same work); and jaxlab's ``insert_many`` with
the C++ options must end in the same state. Compiles the program once (about
a second) where a C++ compiler exists; skipped otherwise.
"""

import jax
import numpy as np
import pytest

from experiments import cpp
from jaxlab import matching as M

from .cpp_reference import CppPushRelabel, TopLevelReached

pytestmark = pytest.mark.skipif(cpp.find_compiler() is None,
                                reason="no C++ compiler ($CXX, c++, g++ or clang++)")

CPP = dict(omega_init="one", cost_dtype="float64", top_level="raise")
MODES = tuple(cpp.MODES)


def _instance(kind, n, seed):
  """Uniform 2-D float64 points: ``unit`` square (omega stays small: long eviction
  chains), ``box`` [0, 100]^2 as the official synthetic runs (omega doubles many
  times, requests move up levels), ``far``: the unit square with request 12 at
  (1e6, 1e6), whose dual passes the top level (where the official code exits)."""
  rng = np.random.default_rng(seed)
  servers, requests = rng.random((n, 2)), rng.random((n, 2))
  if kind == "box":
    servers, requests = servers * 100, requests * 100
  if kind == "far":
    requests[12] = 1e6
  return servers, requests


class _Counting(CppPushRelabel):
  """The restatement, counting placements (arrivals and re-insertions after doublings)."""

  def _place(self, loc) -> None:
    self.stats["placements"] = self.stats.get("placements", 0) + 1
    super()._place(loc)


def _reference(servers, requests):
  ref = _Counting(servers, delta=0.001, eps=0.2, levels=5)
  for i, r in enumerate(requests):
    try:
      ref.insert(r)
    except TopLevelReached:
      return ref, i
  return ref, None


def _assert_state(out, ref, where):
  np.testing.assert_array_equal(out.server_of, ref.server_of(), err_msg=f"servers, {where}")
  np.testing.assert_array_equal(out.level, ref.levels(), err_msg=f"levels, {where}")
  np.testing.assert_array_equal(out.request_duals, ref.request_duals(),
                                err_msg=f"request duals, {where}")
  np.testing.assert_array_equal(out.server_duals, ref.server_duals(),
                                err_msg=f"server duals, {where}")
  assert out.omega == ref.omega and out.restarts == ref.restarts, where


@pytest.mark.parametrize("kind,n,seed", [("unit", 20, 0), ("unit", 20, 3), ("box", 20, 1),
                                         ("box", 20, 3), ("unit", 80, 2), ("box", 80, 4)])
def test_program_equals_the_python_restatement(kind, n, seed):
  servers, requests = _instance(kind, n, seed)
  ref, overflow = _reference(servers, requests)
  assert overflow is None
  for mode in MODES:
    out = cpp.run(servers, requests, mode=mode, repeats=2)
    where = f"{kind} n={n} seed {seed}, mode {mode}"
    assert out.status == "ok" and len(out.seconds) == 2, where
    _assert_state(out, ref, where)
    assert {k: out.counters[k] for k in ref.stats} == ref.stats, where
    assert out.counters["scans"] == out.counters["pushes_free"] + out.counters[
        "pushes_matched"] + out.counters["relabels"], where
    assert out.counters["scans"] <= out.counters["servers_scanned"] <= n * out.counters["scans"]
    np.testing.assert_allclose(out.cost, np.linalg.norm(
        servers[out.server_of] - requests, axis=1).sum(), rtol=1e-12)
    assert np.all(np.diff(out.arrival_seconds) >= 0) and out.arrival_seconds[-1] > 0, where


def test_program_stops_where_the_official_code_exits():
  servers, requests = _instance("far", 20, 5)
  ref, overflow = _reference(servers, requests)
  assert overflow == 12
  for mode in MODES:
    out = cpp.run(servers, requests, mode=mode)
    assert out.status == "overflow" and out.overflow_arrival == 12, mode
  _assert_state(cpp.run(servers, requests, mode="official"), ref, "far, the state before it")


def test_ours_with_the_cpp_options_ends_in_the_programs_state():
  with jax.enable_x64(True):
    for kind, seed in (("unit", 0), ("box", 1), ("far", 5)):
      servers, requests = _instance(kind, 20, seed)
      out = cpp.run(servers, requests)
      state = M.insert_many(M.init(servers, **CPP), requests)
      k = M.num_inserted(state)
      assert k == len(out.server_of) == (12 if kind == "far" else 20), kind
      assert bool(state.extra.overflowed) == (out.status == "overflow"), kind
      np.testing.assert_array_equal(M.assignment(state), out.server_of, err_msg=kind)
      np.testing.assert_array_equal(np.asarray(state.extra.y_r)[:, :k], out.request_duals)
      np.testing.assert_array_equal(state.extra.y_s, out.server_duals, err_msg=kind)
      np.testing.assert_array_equal(np.asarray(state.extra.level)[:k], out.level)
      assert float(state.extra.omega) == out.omega, kind
      assert int(state.extra.restarts) == out.restarts, kind
      if kind != "far":  # ours counts every push, relabel and level move as a step
        c = out.counters
        assert int(state.extra.steps) == (c["pushes_free"] + c["pushes_matched"] + c["relabels"]
                                          + c["moves_up"]), kind
