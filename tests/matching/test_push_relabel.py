"""Push-relabel incremental matching: validity, invariants, quality vs optimum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import matching as M
from jaxlab.matching import push_relabel
from jaxlab.matching.push_relabel import scaled_cost_at, scaled_costs, schedule


def _instance(seed, n, dim=2):
  rng = np.random.default_rng(seed)
  return rng.random((n, dim)).astype(np.float32), rng.random((n, dim)).astype(np.float32)


@pytest.mark.parametrize("seed", range(5))
def test_valid_and_invariants_after_every_insertion(seed):
  servers, requests = _instance(seed, 25)
  state = M.init(servers)
  for i, r in enumerate(requests):
    state = M.insert(state, r)
    M.check_invariants(state)
    assert float(M.cost(state)) >= M.optimal_cost(requests[: i + 1], servers) - 1e-4
  assert M.num_inserted(state) == 25


def test_quality_at_n_200_one_by_one_and_in_parallel_batches():
  servers, requests = _instance(1, 200)
  opt = M.optimal_cost(requests, servers)
  one = M.init(servers)
  for r in requests:
    one = M.insert(one, r)
  M.check_invariants(one)
  assert 1.0 <= float(M.cost(one)) / opt < 1.10
  batched = M.init(servers)
  for i in range(0, 200, 40):  # parallel rounds, invariants after every batch
    batched = M.insert_batch(batched, requests[i:i + 40])
    M.check_invariants(batched)
    assert float(M.cost(batched)) >= M.optimal_cost(requests[: i + 40], servers) - 1e-4
  assert int(batched.extra.rounds) > 0
  assert 1.0 <= float(M.cost(batched)) / opt < 1.10


def test_batch_rounds_reinsert_in_parallel_and_small_gathers_change_nothing(monkeypatch):
  servers, requests = _instance(0, 60)

  def run():
    # A fresh jit of the un-jitted entry point: traced afresh under each setting below (no
    # cached program), compiled once for both batches (one state structure, one width).
    insert_batch = jax.jit(lambda s, r: push_relabel.insert_batch_push_relabel(s, r))
    state, rounds = M.init(servers), []
    for i in (0, 30):
      state = insert_batch(state, requests[i:i + 30])
      rounds.append(int(state.extra.rounds))
    return state, rounds

  # Every omega doubling inside insert_batch re-inserts all requests by parallel rounds:
  # the sequential placement (_place) must never be traced, so it raises if it is.
  def sequential(*args):
    raise AssertionError("insert_batch placed a request sequentially")

  monkeypatch.setattr(push_relabel, "_place", sequential)
  state, rounds = run()
  assert int(state.extra.restarts) > 0  # the instance doubles omega (6 times)
  assert int(state.extra.fallbacks) == 0
  assert rounds[1] > rounds[0] > 0
  M.check_invariants(state)
  assert 1.0 <= float(M.cost(state)) / M.optimal_cost(requests, servers) < 1.10
  # A wide batch's wide gathers run in blocks of rows, their acceptances per server (CPU,
  # batches wider than _BLOCKED_FROM; made small here so that this batch takes that path):
  # the same trajectory and the same requests read.
  monkeypatch.setattr(push_relabel, "_BLOCKED_FROM", 8)
  monkeypatch.setattr(push_relabel, "_BLOCK", 4)
  blocked, blocked_rounds = run()
  assert blocked_rounds == rounds
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(blocked), strict=True):
    np.testing.assert_array_equal(a, b)
  assert int(state.extra.rows_read) >= int(state.extra.rounds) // 2 > 0
  monkeypatch.undo()
  monkeypatch.setattr(push_relabel, "_place", sequential)
  # A round gathers its free requests into the smallest power of two that holds them, and
  # on CPU computes the priorities only in rounds with an admissible edge and runs the round
  # after a relabel in the same loop step, on the same rows (speed-ups): the trajectory
  # equals padding every round to the batch width and calling round_proposals' reference
  # once per loop step, bit for bit (random choices depend on request ids, not on positions;
  # the rounds counted are the same).
  monkeypatch.setattr(push_relabel, "_gather_widths", lambda width: (width,))
  monkeypatch.setattr(push_relabel, "_CPU_FORM", False)
  padded, padded_rounds = run()
  assert padded_rounds == rounds
  np.testing.assert_array_equal(state.server_of, padded.server_of)
  np.testing.assert_array_equal(state.extra.y_r, padded.extra.y_r)
  np.testing.assert_array_equal(state.extra.y_s, padded.extra.y_s)
  np.testing.assert_array_equal(state.extra.level, padded.extra.level)


def test_rounds_stop_once_the_omega_check_must_fail_with_the_same_states(monkeypatch):
  # Levels only rise, so once more requests sit at a level or above than the omega check
  # allows (delta = 0.001: one at level 1 or above), the check after the batch fails. The
  # rounds stop there and omega doubles at once: after every batch the state equals that of
  # rounds run to the end and checked there (the paper's order), only fewer rounds run.
  servers, requests = _instance(0, 60)
  assert [int(x) for x in np.floor(schedule(M.init(servers).config)["count_bound"])] == [
      60, 1, 1, 1, 1, 1, 1]

  def run():
    insert_batch = jax.jit(lambda s, r: push_relabel.insert_batch_push_relabel(s, r))
    state, states = M.init(servers), []
    for i in range(0, 60, 10):
      state = insert_batch(state, requests[i:i + 10])
      states.append(state)
    return states

  # The rounds' precondition (see _parallel_rounds): every request before the chunk is
  # matched when its rounds start, in new batches and in the chunks that re-insert the
  # requests after a doubling. (On this instance no re-insertion stops before its last
  # chunk, so the stop's restart from row 0 there is argued, not exercised.)
  starts, rounds = [], push_relabel._parallel_rounds

  def checked(state, rows, valid, count):
    before = jnp.arange(state.config.capacity) < rows[0]
    jax.debug.callback(lambda first, ok: starts.append((int(first), bool(ok))), rows[0],
                       jnp.all(~before | (state.server_of >= 0)))
    return rounds(state, rows, valid, count)

  monkeypatch.setattr(push_relabel, "_parallel_rounds", checked)
  early = run()
  monkeypatch.undo()
  assert all(ok for _, ok in starts)
  assert sum(first > 0 for first, _ in starts) > 5  # re-insertions ran past their first chunk
  monkeypatch.setattr(push_relabel, "_STOP_EARLY", False)
  full = run()
  counters = ("rounds", "steps", "rows_read")
  for a, b in zip(early, full, strict=True):
    for name, x in a.extra._asdict().items():
      if name not in counters:
        np.testing.assert_array_equal(x, getattr(b.extra, name), err_msg=name)
    a, b = a.replace(extra=None), b.replace(extra=None)  # every other field of the state
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
      np.testing.assert_array_equal(x, y)
  # The first batch doubles omega, and so does a later one (its requests and the earlier
  # ones are then re-inserted 10 at a time).
  assert 0 < int(early[0].extra.restarts) < int(early[-1].extra.restarts)
  assert int(early[-1].extra.rounds) < int(full[-1].extra.rounds)
  assert int(early[-1].extra.rows_read) < int(full[-1].extra.rows_read)


def test_own_relabel_equals_its_kernel_form_and_stays_feasible(monkeypatch):
  # batch_relabel="own" (not the paper's): a relabel raises each free request of the level
  # by its own minimum slack + 1. The CPU rounds and the kernel form (round_proposals'
  # reference, whose per-row minimum slacks are computed independently) give the same
  # trajectory; the duals stay 1-feasible and the cost near the optimum.
  servers, requests = _instance(3, 60)

  def run():
    insert_batch = jax.jit(lambda s, r: push_relabel.insert_batch_push_relabel(s, r))
    state = M.init(servers, batch_relabel="own")
    for i in (0, 30):
      state = insert_batch(state, requests[i:i + 30])
    return state

  own = run()
  M.check_invariants(own)
  assert 1.0 <= float(M.cost(own)) / M.optimal_cost(requests, servers) < 1.10
  # the blocked CPU path of wide batches (its constants made small), then the kernel form
  monkeypatch.setattr(push_relabel, "_BLOCKED_FROM", 8)
  monkeypatch.setattr(push_relabel, "_BLOCK", 4)
  blocked = run()
  monkeypatch.undo()
  monkeypatch.setattr(push_relabel, "_CPU_FORM", False)
  kernel = run()
  for other in (blocked, kernel):
    assert int(own.extra.rounds) == int(other.extra.rounds)
    np.testing.assert_array_equal(own.server_of, other.server_of)
    np.testing.assert_array_equal(own.extra.y_r, other.extra.y_r)
    np.testing.assert_array_equal(own.extra.y_s, other.extra.y_s)
  monkeypatch.undo()
  # The rule matters: the paper's rounds differ on this instance.
  paper = M.init(servers)
  for i in (0, 30):
    paper = M.insert_batch(paper, requests[i:i + 30])
  assert int(paper.extra.rounds) != int(own.extra.rounds)
  with pytest.raises(ValueError, match="batch_relabel must be one of"):
    M.init(servers, batch_relabel="mine")


def test_rows_read_counts_the_requests_the_rounds_gather():
  # Each request sits on its own server: its initial dual makes that edge admissible, so one
  # round reads both requests and both are accepted.
  servers = np.array([[0.0, 0.0], [10.0, 0.0]], np.float32)
  state = M.insert_batch(M.init(servers), servers.copy())
  assert M.assignment(state).tolist() == [0, 1]
  assert (int(state.extra.rounds), int(state.extra.rows_read)) == (1, 2)
  # Both on server 0: one wins the first round; the other needs a relabel before it can
  # propose again, so the rounds read more requests than the batch holds.
  state = M.insert_batch(M.init(servers), np.zeros((2, 2), np.float32))
  assert int(state.extra.rows_read) > 2 and int(state.extra.rounds) >= 3
  assert sorted(M.assignment(state).tolist()) == [0, 1]


def test_cpu_rounds_equal_the_kernel_form_when_float32_leaves_a_slack_of_minus_two(
    monkeypatch):
  # A new request's dual comes from _initial_dual's cost formula, ceil(2 n d / (eps omega)),
  # the rounds' costs from ceil(d * scale0); in float32 these differ by one for this d, so
  # request 1 starts with an eligible slack of -2 to server 0 and -1 to server 1. The CPU
  # form must then still propose (to server 1), as the kernel form does.
  n = 1000
  omega = np.float32(0.2616121470928192)
  dist = np.ones((2, n), np.float32)
  dist[0, n - 1] = omega  # the first request's nearest distance sets omega
  dist[1, 0] = np.float32(5.2322429837659e-05)  # level-0 cost 3 in _initial_dual, 2 in rounds
  dist[1, 1] = np.float32(2.5 * 0.2 * float(omega) / (2 * n))  # cost 3 in both

  def run():
    state = M.init(dist, metric="precomputed")
    for r in (0, 1):
      state = M.insert_batch(state, np.array([r], np.int32))
    return state

  cpu = run()
  monkeypatch.setattr(push_relabel, "_CPU_FORM", False)
  kernel = run()
  assert M.assignment(kernel)[1] == 1
  np.testing.assert_array_equal(cpu.server_of, kernel.server_of)
  np.testing.assert_array_equal(cpu.extra.y_r, kernel.extra.y_r)
  assert int(cpu.extra.rounds) == int(kernel.extra.rounds)


def test_exact_tail_uses_only_tail_servers_and_stays_valid():
  servers, requests = _instance(2, 24)
  state = M.init(servers, exact_tail=4)
  for i in (0, 8):
    state = M.insert_batch(state, requests[i:i + 8])
  assert int(state.extra.fallbacks) == 0  # 8 servers still free: all by rounds
  # This batch ends in the tail: one by one, its first 4 by push-relabel, the last 4 exact.
  state = M.insert_batch(state, requests[16:])
  assert int(state.extra.fallbacks) == 8
  M.check_invariants(state)
  tail = np.asarray(state.extra.tail_servers)
  assert tail.sum() == 4
  assert np.all(tail[M.assignment(state)[-4:]])


def test_float64_costs_with_an_exact_tail():
  # The tail's potentials u, v are sums of float64 distances: init keeps them in that dtype
  # (they were float32, and the tail's branch then disagreed with push-relabel's in dtype).
  servers, requests = _instance(5, 12)
  with jax.enable_x64(True):
    state = M.init(servers.astype(np.float64), cost_dtype="float64", exact_tail=3)
    assert state.u.dtype == state.v.dtype == np.float64
    state = M.insert_many(state, requests.astype(np.float64))
    assert M.num_inserted(state) == 12 and state.u.dtype == np.float64
    M.check_invariants(state)
    assert np.all(np.asarray(state.extra.tail_servers)[M.assignment(state)[-3:]])


def test_l1_and_precomputed_agree():
  servers, requests = _instance(3, 30, dim=5)
  d = M.cost_matrix(requests, servers, "l1")
  a, b = M.init(servers, metric="l1"), M.init(d, metric="precomputed")
  for i in range(0, 30, 6):  # batches of 6: gathers of 1 or 6 rows (a smaller program)
    a = M.insert_batch(a, requests[i:i + 6])
    b = M.insert_batch(b, np.arange(i, i + 6))
  M.check_invariants(a)
  M.check_invariants(b)
  np.testing.assert_allclose(float(M.cost(a)), float(M.cost(b)), rtol=1e-4)


def test_scaled_costs_by_hand():
  servers, _ = _instance(0, 10)
  cfg = M.init(servers).config
  sched = schedule(cfg)
  # d_0 = ceil(2 n d / (eps omega)) = ceil(2 * 10 * 0.3 / 0.2) = 30; d_1 = ceil(30 / div_0).
  d = np.asarray(scaled_costs(cfg, np.array([0.3], np.float32), np.float32(1.0)))
  assert d[0, 0] == 30
  assert d[1, 0] == int(np.ceil(30 / sched["divisor"][0]))
  np.testing.assert_allclose(sched["y_max"][0], 25 / 0.2 * 10 ** 0.002)


def test_scaled_cost_at_matches_every_level():
  servers, _ = _instance(0, 10)
  cfg = M.init(servers).config
  dist = np.random.default_rng(1).uniform(0, 2, 50).astype(np.float32)
  full = np.asarray(scaled_costs(cfg, dist, np.float32(0.7)))
  for level in range(full.shape[0]):
    np.testing.assert_array_equal(scaled_cost_at(cfg, dist, np.float32(0.7), level), full[level])


def test_bad_options():
  servers, _ = _instance(0, 5)
  with pytest.raises(ValueError, match="eps"):
    M.init(servers, eps=0.0)
  with pytest.raises(ValueError, match="levels"):
    M.init(servers, levels=0)
  with pytest.raises(ValueError, match="exact_tail"):
    M.init(servers, exact_tail=9)


@pytest.mark.parametrize("scale", [1e-3, 1e3])
def test_quality_does_not_depend_on_units(scale):
  """omega starts from the data (the official code's omega = 1 was unit-bound)."""
  servers, requests = _instance(4, 150)
  state = M.insert_many(M.init(servers * scale), requests * scale)
  M.check_invariants(state)
  assert float(M.cost(state)) / M.optimal_cost(requests * scale, servers * scale) < 1.10


def _cpu_args(*args):
  """``args`` committed to the host CPU: a jit compiles for the CPU on any default backend."""
  return jax.device_put(args, jax.devices("cpu")[0])


def test_insertion_programs_compile_without_the_tree_reduction_windows():
  # api.COMPILER_OPTIONS turns off XLA's tree-reduction rewriter for the CPU insertion
  # programs (their n-wide minima then run as one loop each); an XLA that renamed the pass
  # would ignore the option: this notices. 64 servers: reductions past the rewriter's 32.
  from jaxlab.matching import api
  servers, requests = _instance(0, 64)
  args = _cpu_args(M.init(servers), jax.numpy.asarray(requests[0]))
  windows = lambda c: c.as_text().count("reduce-window(")  # noqa: E731
  without = jax.jit(api._insert_checked).lower(*args).compile()
  assert windows(api._insert.cpu.lower(*args).compile()) < windows(without)


def test_insertion_programs_compile_without_the_thread_pool_split():
  # api.COMPILER_OPTIONS turns off XLA:CPU's parallel task assigner, which marks large
  # loop fusions to run in parts on the thread pool (outer_dimension_partitions). At
  # n = 2,000 a default compile of the sequential insertion marks one (the branch of
  # steps above level 0) whenever the pool has more than one thread; an XLA that renamed
  # the pass would ignore the option: this notices.
  from experiments.bench_matching import xla_threads
  from jaxlab.matching import api
  servers, requests = _instance(0, 2000)
  args = _cpu_args(M.init(servers), jax.numpy.asarray(requests[0]))
  splits = lambda c: c.as_text().count("outer_dimension_partitions")  # noqa: E731
  assert splits(api._insert.cpu.lower(*args).compile()) == 0
  default = splits(jax.jit(api._insert_checked).lower(*args).compile())
  assert default > 0 if xla_threads() > 1 else default == 0
