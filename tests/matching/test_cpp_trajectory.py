"""Push-relabel with the official C++ code's options, step by step against its re-statement.

With ``omega_init="one"``, ``cost_dtype="float64"`` and ``top_level="raise"``
(and no exact tail: the C++ tail never starts for n < 50) every insertion must
leave exactly the state of :class:`cpp_reference.CppPushRelabel`, a plain
Python transliteration of the C++ sequential algorithm: the server of each
request, the request and server duals at every level, the levels, omega and
the number of omega doublings. All instances have n = 20 servers and 20
requests, so one compiled insertion serves them all.
"""

import jax
import numpy as np
import pytest

from jaxlab import matching as M
from jaxlab.matching.push_relabel import num_levels

from .cpp_reference import CppPushRelabel, TopLevelReached

N = 20
CPP = dict(omega_init="one", cost_dtype="float64", top_level="raise")


def _instance(kind, seed):
  """float64 servers and requests, uniform 2-D.

  ``unit``: the unit square (omega stays near 1: long eviction chains);
  ``box``: a [0, 100] square as in the official synthetic runs (omega doubles
  6-7 times from 1, requests move up levels); ``far``: the unit square with
  request 12 moved to (1e6, 1e6), whose dual passes the top level (the C++
  code exits there).
  """
  rng = np.random.default_rng(seed)
  servers, requests = rng.random((N, 2)), rng.random((N, 2))
  if kind == "box":
    servers, requests = servers * 100, requests * 100
  if kind == "far":
    requests[12] = 1e6
  return servers, requests


def _assert_same(state, ref, k, where):
  assert int(state.count) == k, where
  np.testing.assert_array_equal(M.assignment(state), ref.server_of(), err_msg=f"servers, {where}")
  np.testing.assert_array_equal(np.asarray(state.extra.y_r)[:, :k], ref.request_duals(),
                                err_msg=f"request duals, {where}")
  np.testing.assert_array_equal(state.extra.y_s, ref.server_duals(),
                                err_msg=f"server duals, {where}")
  np.testing.assert_array_equal(np.asarray(state.extra.level)[:k], ref.levels(),
                                err_msg=f"levels, {where}")
  assert float(state.extra.omega) == ref.omega, where
  assert int(state.extra.restarts) == ref.restarts, where


def test_trajectory_equals_the_cpp_code_after_every_insertion():
  totals = dict.fromkeys(("pushes_free", "pushes_matched", "relabels", "moves_up"), 0)
  max_level = restarts = 0
  with jax.enable_x64(True):
    for kind, seed in [("unit", 0), ("unit", 3), ("box", 1), ("box", 3), ("far", 5)]:
      servers, requests = _instance(kind, seed)
      state = M.init(servers, **CPP)
      assert state.servers.dtype == np.float64 and state.extra.omega.dtype == np.float64
      ref = CppPushRelabel(servers, delta=0.001, eps=0.2, levels=5)
      for i, r in enumerate(requests):
        where = f"{kind} seed {seed}, after request {i}"
        try:
          ref.insert(r)
        except TopLevelReached:  # the C++ code exits: ours undoes the insertion and stops
          out = M.insert(state, r)
          assert kind == "far" and i == 12 and bool(out.extra.overflowed), where
          _assert_same(out, ref, i, where)  # the state before request i, flag set
          np.testing.assert_array_equal(out.requests[i], r)  # kept for inspection
          later = M.insert(out, requests[i + 1])  # a no-op from now on
          assert all(np.array_equal(a, b) for a, b in
                     zip(jax.tree.leaves(later), jax.tree.leaves(out), strict=True)), where
          break
        state = M.insert(state, r)
        assert not bool(state.extra.overflowed), where
        _assert_same(state, ref, i + 1, where)
      else:
        assert kind != "far", "the far request did not pass the top level"
        M.check_invariants(state)
      for key in totals:
        totals[key] += ref.stats[key]
      max_level = max(max_level, int(ref.levels().max()))
      restarts += ref.restarts
  # The instances exercise every rule: free and matched pushes, relabels, level moves, doublings.
  assert min(totals.values()) > 0 and max_level >= 1 and restarts >= 10, (totals, restarts)


def test_top_level_stay_keeps_the_far_request_at_the_top():
  servers, requests = _instance("far", 5)
  state = M.insert_many(M.init(servers.astype(np.float32), omega_init="one"),
                        requests[:13].astype(np.float32))
  assert M.num_inserted(state) == 13 and not bool(state.extra.overflowed)
  assert int(state.extra.level[12]) == num_levels(state.config) - 1
  M.check_invariants(state)


def test_cpp_options_are_validated():
  servers, requests = _instance("unit", 0)
  for name, bad in (("omega_init", "zero"), ("cost_dtype", "float16"), ("top_level", "exit")):
    with pytest.raises(ValueError, match=f"{name} must be one of"):
      M.init(servers, **{name: bad})
  with pytest.raises(ValueError, match="jax_enable_x64"):
    M.init(servers, cost_dtype="float64")
  with pytest.raises(ValueError, match="not accepted by algorithm='exact'"):
    M.init(servers, algorithm="exact", omega_init="one")
  with jax.enable_x64(True):
    state = M.init(servers, **CPP)
    with pytest.raises(ValueError, match="insert_batch .* supports cost_dtype='float32'"):
      M.insert_batch(state, requests[:4])
  with pytest.raises(ValueError, match="jax_enable_x64"):  # a float64 state used without x64
    M.insert(state, requests[0])
  with pytest.raises(ValueError, match="top_level='stay'"):
    M.insert_batch(M.init(servers, top_level="raise"), requests[:4])
