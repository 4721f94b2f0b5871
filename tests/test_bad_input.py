"""The bad-input probe (issue 16): bad or edge input in, the named error out.

Or, for traced input that cannot raise, a flagged and non-silent result.

Each case was once silent (a wrong result), a hang, or an obscure late error.
Inputs are tiny, so the module runs in seconds; add a case here for every new
method's bad inputs, so that the count of silent results stays at zero.

Resuming from a checkpoint of another run (other hidden sizes, eval_every,
keys, carry shapes or dtypes) and from a damaged newest checkpoint needs
training runs, so those cases live beside the resume tests they extend:
tests/training/test_chunks.py, tests/rl/test_agents.py and tests/rl/test_hrl.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import matching as M

# --- matching: finite coordinates whose distances overflow float32 ------------------------------

_SERVERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_matching_rejects_overflowing_coordinates(algorithm):
  with pytest.raises(ValueError, match="servers coordinates are too large"):
    M.init(_SERVERS * 1e30, algorithm=algorithm)
  state = M.init(_SERVERS, algorithm=algorithm)
  with pytest.raises(ValueError, match="request coordinates are too large"):
    M.insert(state, np.array([1e30, 0.0]))
  with pytest.raises(ValueError, match="requests coordinates are too large"):
    M.insert_batch(state, np.array([[0.5, 0.5], [1e30, 0.0]]))
  with pytest.raises(ValueError, match="too large"):
    M.init(np.full((2, 3), 1e38, np.float32), algorithm=algorithm, metric="precomputed")


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_matching_traced_overflow_is_rejected_not_assigned(algorithm):
  insert = jax.jit(M.insert)  # traced requests: the eager checks cannot run
  state = insert(M.init(_SERVERS, algorithm=algorithm), jnp.array([0.1, 0.0]))
  assert not bool(state.rejected) and int(state.count) == 1
  out = insert(state, jnp.array([1e30, 0.0]))
  assert bool(out.rejected) and int(out.count) == 1
  np.testing.assert_array_equal(out.server_of, state.server_of)


def _stored(state, coords):
  return state.replace(requests=state.requests.at[state.count].set(jnp.asarray(coords)))


def test_matching_exact_loop_ends_on_a_non_finite_row():
  # Bypasses the checks: the augmenting-path loop itself must end (it spun
  # forever once every reachable server was taken) and flag the insertion.
  from jaxlab.matching.exact import insert_exact

  state = M.init(_SERVERS, algorithm="exact")
  state = M.insert_batch(state, np.array([[0.0, 0.0], [1.0, 0.0]]))
  out = jax.jit(insert_exact)(_stored(state, [1e30, 0.0]), state.count)
  assert bool(out.rejected) and int(out.count) == 2
  out = jax.jit(insert_exact)(_stored(state, [np.nan, 0.0]), state.count)
  assert bool(out.rejected) and int(out.count) == 2


def test_matching_greedy_never_double_books_on_a_non_finite_row():
  from jaxlab.matching.greedy import insert_greedy

  state = M.insert(M.init(_SERVERS, algorithm="greedy"), np.array([0.0, 0.0]))  # takes server 0
  for bad in ([1e30, 0.0], [np.nan, 0.0]):
    out = jax.jit(insert_greedy)(_stored(state, bad), state.count)
    assert bool(out.rejected) and int(out.count) == 1
    np.testing.assert_array_equal(out.request_of, state.request_of)


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_matching_empty_batch_is_a_no_op(algorithm):
  state = M.init(_SERVERS, algorithm=algorithm)
  for fn in (M.insert_batch, M.insert_many):
    out = fn(state, np.zeros((0, 2), np.float32))
    assert int(out.count) == 0 and not bool(out.rejected)


# --- moment storage: one bad gradient element spoils one weight, not a block ----------------------


@pytest.mark.parametrize(("storage", "bad"), [
    ("int8", np.nan), ("int8", np.inf), ("int8", 1e30),
    ("float8_e4m3fn", np.nan), ("float8_e4m3fn", np.inf), ("float8_e4m3fn", 1e30),
    ("bfloat16", np.nan),  # no block scales: elementwise already, kept as a reference case
])
def test_moment_storage_bad_gradient_element_stays_one_element(storage, bad):
  import optax

  from jaxlab.optim import quantized_adam

  params = jnp.linspace(-1.0, 1.0, 600, dtype=jnp.float32)  # 3 blocks of 256
  grads = jnp.sin(jnp.arange(600, dtype=jnp.float32)).at[300].set(bad)

  def run(opt):
    state = opt.init(params)
    p = params
    updates, state = jax.jit(opt.update)(grads, state, p)
    return np.asarray(optax.apply_updates(p, updates))

  ours = run(quantized_adam(1e-2, moment_storage=storage))
  ref = run(optax.adam(1e-2))
  spoiled, ref_spoiled = np.flatnonzero(~np.isfinite(ours)), np.flatnonzero(~np.isfinite(ref))
  assert set(spoiled) <= {300}, spoiled  # at most the bad element (optax: at most one)
  assert set(ref_spoiled) <= set(spoiled)  # a NaN optax shows is not hidden either


# --- quantize_bits: the widths FloatFormat rejects, and float64 beyond float32 ---------------


@pytest.mark.parametrize(("exp_bits", "man_bits", "error", "match"), [
    (9, 3, ValueError, "exp_bits must be in \\[2, 8\\]"),     # once: every value -> -0.9375
    (1, 3, ValueError, "exp_bits must be in \\[2, 8\\]"),
    (4, -2, ValueError, "man_bits must be in \\[0, 23\\]"),   # once: -1.7e38
    (4, 24, ValueError, "man_bits must be in \\[0, 23\\]"),
    (4, 3.0, TypeError, "man_bits must be integers"),
    (np.array([4, 9]), 3, ValueError, "exp_bits must be in \\[2, 8\\], got 9"),
])
def test_quantize_bits_rejects_what_float_format_rejects(exp_bits, man_bits, error, match):
  from jaxlab.quant import FloatFormat
  from jaxlab.quant.float_format import quantize_bits

  with pytest.raises(error, match=match):
    quantize_bits(jnp.float32(0.3), exp_bits, man_bits)
  if np.ndim(exp_bits) == 0:
    with pytest.raises((ValueError, TypeError)):
      FloatFormat(exp_bits, man_bits)


def test_quantize_bits_bad_max_value():
  from jaxlab.quant.float_format import quantize_bits

  with pytest.raises(ValueError, match="max_value"):
    quantize_bits(jnp.float32(0.3), 4, 3, 447.0)  # not on the E4M3 grid
  with pytest.raises(ValueError, match="max_value"):
    quantize_bits(jnp.float32(0.3), 4, 3, -1.0)


def test_quantize_bits_traced_widths_still_run():
  from jaxlab.quant.float_format import quantize_bits

  sweep = jax.jit(jax.vmap(lambda m: quantize_bits(jnp.float32(0.3), 8, m)))
  np.testing.assert_array_equal(sweep(jnp.arange(1, 4)), [0.25, 0.3125, 0.3125])


def test_quantize_bits_float64_beyond_float32_saturates():
  import ml_dtypes

  from jaxlab.quant import FloatFormat
  from jaxlab.quant.float_format import quantize_bits

  with jax.enable_x64(True):
    x = jnp.array([1e39, -1e300, np.inf, -np.inf, 0.1], jnp.float64)
    y = np.asarray(quantize_bits(x, 8, 7))
  top = FloatFormat.BF16.max_finite
  np.testing.assert_array_equal(y[:4], [top, -top, np.inf, -np.inf])
  assert y[4] == float(np.float64(0.1).astype(ml_dtypes.bfloat16))  # in range: unchanged


# --- offline datasets: every field checked, not just the actions -------------------------------


def _offline_dataset(n=8):
  """A valid tiny dataset (the fields of ``envs.make_dataset``, built without an env)."""
  rng = np.random.default_rng(0)
  obs = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
  return {"observations": obs, "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
          "rewards": -np.ones(n, np.float32), "next_observations": obs[::-1].copy(),
          "masks": np.ones(n, np.float32), "terminals": np.zeros(n, np.float32)}


def test_offline_dataset_valid_passes():
  from jaxlab.rl.train import check_dataset

  assert check_dataset(_offline_dataset())["rewards"].shape == (8,)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("rewards", np.nan, "rewards.*non-finite"),   # once: every critic parameter NaN
    ("observations", np.inf, "observations.*non-finite"),
    ("next_observations", np.nan, "next_observations.*non-finite"),
    ("masks", 0.5, "masks.*only 0 and 1"),
    ("terminals", 2.0, "terminals.*only 0 and 1"),
])
def test_offline_dataset_bad_fields(field, value, match):
  from jaxlab.rl.agents import FACAgent, FACConfig
  from jaxlab.rl.train import make_train

  data = _offline_dataset()
  data[field].reshape(-1)[3] = value
  with pytest.raises(ValueError, match=match):
    make_train(FACAgent, FACConfig(hidden_dims=(8,), batch_size=4), data)


def test_offline_dataset_empty():
  from jaxlab.rl.agents import FACAgent, FACConfig
  from jaxlab.rl.train import make_train

  data = {k: v[:0] for k, v in _offline_dataset().items()}
  with pytest.raises(ValueError, match="dataset is empty"):
    make_train(FACAgent, FACConfig(hidden_dims=(8,), batch_size=4), data)


# --- environments: action shape, non-finite actions, wall_obs ----------------------------------


def _envs():
  from jaxlab import envs

  return [(envs.PointMaze(), envs.MazeParams()), (envs.PointPush(), envs.PushParams()),
          (envs.MultiGoalPoint(), envs.EnvParams())]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_env_action_of_the_wrong_length_raises(index):
  env, params = _envs()[index]
  key = jax.random.key(0)
  _, state = jax.eval_shape(env.reset_env, key, params)  # raised while tracing: no compile
  for action in (jnp.array([1.0]), jnp.ones(3), jnp.ones((1, 2))):  # [1.0] once moved both axes
    with pytest.raises(ValueError, match="action must have shape \\(2,\\)"):
      jax.eval_shape(env.step_env, key, state, action, params)


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_env_non_finite_action_is_flagged_and_does_not_poison(index, bad):
  env, params = _envs()[index]
  _, state = env.reset(jax.random.key(0), params)
  step = jax.jit(env.step_env)  # gymnax's step adds an auto-reset
  obs, new, _, _, info = step(jax.random.key(1), state, jnp.array([bad, 0.5]), params)
  assert bool(info["invalid_action"])
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(new)) and np.all(np.isfinite(obs))
  for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(state), strict=True):
    if a.dtype.kind == "f":
      np.testing.assert_array_equal(a, b)  # a zero move
  _, _, _, _, info = step(jax.random.key(1), state, jnp.array([0.2, 0.5]), params)
  assert not bool(info["invalid_action"])


def test_env_unknown_wall_obs_raises():
  from jaxlab import envs

  with pytest.raises(ValueError, match="wall_obs must be one of"):
    envs.MazeParams(wall_obs="walls")


# --- seeds, and a benchmark's step count --------------------------------------------------------


@pytest.mark.parametrize("seed", [1.5, "0", True, np.zeros(2, np.int32)])
def test_non_integer_seeds_raise_at_construction(seed):
  from jaxlab.optim import quantized_adam, quantized_muon
  from jaxlab.quant import FloatFormat

  with pytest.raises(TypeError, match="seed must be an integer"):
    M.init(_SERVERS, seed=seed)
  with pytest.raises(TypeError, match="seed must be an integer"):
    quantized_adam(1e-3, seed=seed)
  with pytest.raises(TypeError, match="seed must be an integer"):
    quantized_adam(1e-3, weights=FloatFormat.BF16, rounding="stochastic", seed=seed)
  with pytest.raises(TypeError, match="seed must be an integer"):
    quantized_muon(1e-3, seed=seed)


def test_integer_and_traced_seeds_still_work():
  from jaxlab.optim import quantized_adam

  assert M.init(_SERVERS, seed=np.int64(3)).config.seed == 3
  params = jnp.ones(3)
  init = jax.jit(lambda s: quantized_adam(1e-3, seed=s).init(params))
  assert jax.tree.leaves(init(jnp.int32(2)))


# --- the fused quantized Adam: implementation=, and a random stream's offset ----------------------


@pytest.mark.parametrize("implementation", ["cuda", "Pallas", "", None, 1])
def test_unknown_implementation_raises_at_construction(implementation):
  from jaxlab.optim import quantized_adam, quantized_muon

  match = r"implementation must be one of \('auto', 'pallas', 'xla'\)"
  with pytest.raises(ValueError, match=match):
    quantized_adam(1e-3, implementation=implementation)
  with pytest.raises(ValueError, match=match):
    quantized_muon(1e-3, implementation=implementation)


@pytest.mark.parametrize("offset, error", [(-1, ValueError), (1.0, TypeError),
                                           (True, TypeError), (np.zeros(2, int), TypeError)])
def test_random_bits_bad_offset_raises(offset, error):
  from jaxlab.core.rng import random_bits

  with pytest.raises(error, match="offset must be"):
    random_bits(jax.random.key(0), (3,), offset=offset)


def test_bench_fractal_gd_rejects_a_bad_step_count(tmp_path):
  from experiments import bench_fractal_gd

  for argv in (["--max-steps", "-1"], ["--max-steps", "0"], ["--resolution", "0"]):
    with pytest.raises(ValueError, match="max_steps|resolution"):
      bench_fractal_gd.main([*argv, "--out", str(tmp_path)])
  assert not any(tmp_path.iterdir())  # nothing written


# --- Expert Divergence Learning: domain labels outside [0, num_domains) -------------------------


def test_expert_divergence_flags_out_of_range_domain_labels():
  from jaxlab.lm import expert_divergence as ed

  probs = jnp.full((1, 3, 2, 4), 0.25)
  with pytest.raises(ValueError, match=r"domains must be ints in \[0, num_domains=2\), got 2"):
    ed.expert_divergence_loss(probs, jnp.array([0, 1, 2]), 2)
  # traced labels cannot raise: the row is left out and counted, not silently dropped
  _, info = jax.jit(ed.expert_divergence_loss, static_argnums=2)(probs, jnp.array([0, 1, -1]), 2)
  assert int(info["ed/unlabelled"]) == 1 and int(info["ed/pairs"]) == 1


# --- Cascadia: thresholds, worker counts, latency tables, and M/M/c tails that overflowed -------


def test_cascadia_rejects_bad_thresholds_workers_and_tables():
  from jaxlab.inference import cascadia as ca

  scores = np.full((4, 3), 0.5)
  with pytest.raises(ValueError, match=r"thresholds must be in \[0, 1\]"):
    ca.workloads(scores, [0.5, np.nan])
  with pytest.raises(ValueError, match="thresholds must have num_models - 1 = 2 entries"):
    ca.cascade_quality(np.ones((4, 3), bool), scores, [0.5, 0.5, 0.5])
  for workers in (0, -1, 2.0, True):
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
      ca.allocate(np.ones((1, 3)), workers)
  with pytest.raises(ValueError, match="no NaN"):
    ca.allocate(np.array([[np.inf, np.nan, 1.0]]), 2)
  with pytest.raises(ValueError, match="non-increasing in the number of workers"):
    ca.allocate_brute_force(np.array([[np.inf, 1.0, 3.0], [np.inf, 2.0, 1.0]]), 2)
  # no split keeps every queue stable: an infinite latency and no allocation, not a crash
  assert ca.allocate(np.array([[np.inf, np.inf, 1.0]] * 2), 2) == ca.Allocation(None, np.inf)
  # lambda >= c mu: an unstable queue has infinite latency
  assert ca.mmc_p95(2.0, 1.0, 2) == np.inf


def test_cascadia_tail_does_not_overflow_when_the_wait_is_slower_than_service():
  from jaxlab.inference import cascadia as ca

  # c mu - lambda < mu: the tail written as e^{-mu t} (1 - e^{-(theta - mu) t}) / (theta - mu)
  # overflows to inf * 0 = NaN far out, and the p95's root finder stops on the NaN
  tail = float(ca.mmc_sojourn_sf(5e3, 1.95, 1.0, 2))
  assert np.isfinite(tail) and tail >= 0
  assert np.isfinite(ca.mmc_p95(1.95, 1.0, 2))


# --- G-NLL: an AUROC needs both classes ----------------------------------------------------------


def test_auroc_of_one_class_raises_or_is_nan_under_jit():
  from jaxlab.inference import g_nll as gn

  scores, labels = jnp.array([0.1, 0.5, 0.9]), jnp.array([1, 1, 1])
  with pytest.raises(ValueError, match="labels must hold both classes, got 3 positives of 3"):
    gn.auroc(scores, labels)
  # traced labels cannot raise: the area is NaN, not a number that reads as a result
  assert np.isnan(float(jax.jit(gn.auroc)(scores, labels)))
  assert float(jax.jit(gn.auroc)(scores, jnp.array([0, 0, 1]))) == 1.0


# --- distill_kac: non-finite times and an unknown sampler -------------------------------------


def test_distill_kac_rejects_non_finite_times_and_unknown_methods():
  from jaxlab.generative import distill_kac as dk  # noqa: PLC0415

  key = jax.random.key(0)
  with pytest.raises(ValueError, match="^s must be finite"):
    dk.sample_kac(key, float("inf"), (3,))
  field = lambda obs, x, t: x  # noqa: E731
  x = jnp.zeros((2, 3))
  with pytest.raises(ValueError, match="^T must be finite"):
    dk.kac_sample(field, jnp.zeros((2, 1)), x, 4, T=float("nan"))
  with pytest.raises(ValueError, match="^method must"):
    dk.kac_sample(field, jnp.zeros((2, 1)), x, 4, method="heun")


# --- RedacBench: a policy given as one string, an empty pool, over-long sources ------------------


def test_redacbench_rejects_a_string_policy_empty_pools_and_long_sources():
  from jaxlab.data import fact_texts as ft  # noqa: PLC0415
  from jaxlab.safety import redacbench as rb  # noqa: PLC0415

  # a string is an iterable of predicate names one character long: silently nothing sensitive
  with pytest.raises(TypeError, match="Policy.sensitive must be a set of predicate names"):
    rb.Policy("lives_in")
  with pytest.raises(ValueError, match="confusions must not be empty"):
    rb.pooled([], "text")
  words = ft.render([("works_at", "p0", "c0"), ("lives_in", "p0", "t1")])
  with pytest.raises(ValueError, match=r"sources\[0\] has 8 words > src_len=4"):
    ft.encode_pairs(ft.tokenizer(), [words], None, 4, 0)
  with pytest.raises(ValueError, match="stated predicate"):
    ft.render([("in_city", "p0", "t1")])  # an implied predicate has no sentence


# --- lumos: ids outside the network's vocabulary, mask ratios out of range --------------------

def test_lumos_rejects_ids_outside_the_vocab_and_bad_ratios():
  from jaxlab.generative import lumos  # noqa: PLC0415
  from jaxlab.models.transformer import TransformerConfig, create  # noqa: PLC0415

  lay = lumos.VideoLayout(text_len=1, frames=2, rows=1, cols=2)
  net = create(TransformerConfig(vocab_size=8, d_model=32, num_heads=1, num_layers=1,
                                 seq_len=lay.length), jax.random.key(0))
  pos, key = lumos.flat_position_ids(lay), jax.random.key(1)
  text, video = jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 2, 2), jnp.int32)
  with pytest.raises(ValueError, match="vocab_size=8"):  # [MASK] = 8 is past the embedding
    lumos.generate_video(net, text, key, lay, pos, num_codes=8, mask_id=8, steps=2)
  with pytest.raises(ValueError, match="^min_ratio"):
    lumos.video_loss(net, text, video, key, lay, pos, num_codes=4, mask_id=4, min_ratio=1.5)
  with pytest.raises(ValueError, match="^z_weight"):
    lumos.video_loss(net, text, video, key, lay, pos, num_codes=4, mask_id=4,
                     z_weight=float("nan"))
  with pytest.raises(ValueError, match="^mask_history_ratio"):
    lumos.later_frames_cross_entropy(net, text, video, lay, pos, num_codes=4, mask_id=4,
                                     mask_history_ratio=float("nan"))


# --- dl4nd: a suspect with no candidate proxy, labels and domains out of range ----------------

def test_dl4nd_keeps_the_label_without_a_candidate_and_rejects_bad_rows():
  from jaxlab.vision import dl4nd  # noqa: PLC0415

  feats = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
  labels, domains, suspect = np.array([2, 1]), np.array([0, 1]), np.array([True, True])
  # only domain 0 has proxies: row 0 (domain 0) has no other-domain candidate; argmax over an
  # all -inf row would silently pick class 0
  proxies = dl4nd.Proxies(jnp.ones((3, 2, 2)), jnp.array([[1, 0], [1, 0], [1, 0]]))
  new, dom = dl4nd.nearest_proxy_labels(feats, labels, domains, suspect, proxies)
  np.testing.assert_array_equal(new[0], 2)  # kept, and flagged by domain -1
  assert int(dom[0]) == -1 and int(dom[1]) == 0
  with pytest.raises(ValueError, match="domains must be in"):
    dl4nd.nearest_proxy_labels(feats, labels, np.array([0, 2]), suspect, proxies)
  with pytest.raises(ValueError, match="suspect must be a bool"):
    dl4nd.nearest_proxy_labels(feats, labels, domains, np.array([1, 0]), proxies)
  with pytest.raises(TypeError, match="labels must be integers"):
    dl4nd.class_domain_proxies(feats, labels.astype(float), domains, suspect, num_classes=3,
                               num_domains=2)


# --- EgoWorld: collinear keypoints (an arbitrary rotation), an empty hand mask, no points -----

def test_egoworld_rejects_collinear_keypoints_and_flags_empty_inputs():
  from jaxlab.vision import egoworld as ew  # noqa: PLC0415

  line = np.outer(np.arange(5.0), [1.0, 2.0, 3.0])
  with pytest.raises(ValueError, match="src must span at least D - 1 = 2 dimensions"):
    ew.umeyama(line, line + 1.0)  # any rotation about the line fits: silently arbitrary
  # no hand pixels: s* is NaN (flagged), not a default scale
  assert np.isnan(ew.depth_scale(np.ones((2, 2)), np.ones((2, 2)), np.zeros((2, 2), bool)))
  # every point behind the camera: an empty map, nothing covered
  out = ew.splat(np.array([[0.0, 0.0, -1.0]]), np.ones((1, 3)), np.eye(3), (2, 2))
  assert not out.mask.any() and np.isinf(out.depth).all()
