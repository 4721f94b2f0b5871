"""TTOM: the JSD layout loss on hand-built maps, Gaussian targets, the memory on a scripted
sequence, and the sampler hooks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from jaxlab.generative import ttom
from jaxlab.models import ddpm

DCFG = ttom.DiTConfig(d_model=16, num_heads=1, num_layers=2)  # 6 x 6 patches of 4 x 4


def test_jsd_known_values():
  one = jnp.array([[1.0, 0.0], [0.0, 0.0]])
  other = jnp.array([[0.0, 1.0], [0.0, 0.0]])
  np.testing.assert_allclose(ttom.jsd(one, other), np.log(2), rtol=1e-6)  # disjoint
  np.testing.assert_allclose(ttom.jsd(one, one), 0.0, atol=1e-7)
  half = jnp.array([[0.5, 0.5], [0.0, 0.0]])
  # M = (3/4, 1/4): KL(P||M) = log 4/3, KL(Q||M) = (1/2) log 4/3  ->  (3/4) log 4/3
  np.testing.assert_allclose(ttom.jsd(one, half), 0.75 * np.log(4 / 3), rtol=1e-6)
  # unnormalised maps are normalised first; scipy's distance is the square root
  p, q = jax.random.uniform(jax.random.key(0), (2, 3, 5, 5))
  ref = [jensenshannon(np.ravel(a), np.ravel(b)) ** 2 for a, b in zip(p, q, strict=True)]
  np.testing.assert_allclose(jax.jit(ttom.jsd)(3 * p, 5 * q), ref, rtol=1e-5)


def test_gaussian_targets_by_hand():
  boxes = jnp.array([[0, 0, 8, 8], [10, 12, 18, 20], [16, 0, 24, 8]])
  g = ttom.gaussian_targets(boxes, jnp.array([3, 5, 3]), jnp.array([True, True, True]), 24)
  s = (8 + 1) / 4  # sigma = (extent + 1) / 4; centre (lo + hi - 1) / 2 = 3.5
  one = lambda y, x, cy, cx: np.exp(-0.5 * ((y - cy) / s) ** 2 - 0.5 * ((x - cx) / s) ** 2)
  np.testing.assert_allclose(g[1, 13, 15], one(13, 15, 13.5, 15.5), rtol=1e-6)
  assert float(g[1, 9, 15]) == 0.0 and float(g[1, 13, 20]) == 0.0  # outside the box: 0
  # the two 3s are summed into both of their maps; the 5 keeps its own
  np.testing.assert_allclose(g[0], g[2], rtol=1e-6)
  np.testing.assert_allclose(g[0, 3, 4], one(3, 4, 3.5, 3.5), rtol=1e-6)
  np.testing.assert_allclose(g[0, 20, 2], one(20, 2, 19.5, 3.5), rtol=1e-6)
  assert float(g[1, 3, 4]) == 0.0
  off = ttom.gaussian_targets(boxes, jnp.array([3, 5, 3]), jnp.array([True, True, False]), 24)
  assert float(off[2].sum()) == 0.0 and float(off[0, 20, 2]) == 0.0


def _cross(a_tok1):
  """Cross-attention (L=1, B=1, H=2, T=36, S=3) whose caption-token-1 column is given per
  head ``(2, 36)``; the rest goes to the null token."""
  a = jnp.zeros((1, 1, 2, 36, 3))
  a = a.at[0, 0, :, :, 1].set(a_tok1)
  return a.at[0, 0, :, :, 0].set(1.0 - a_tok1)


def test_layout_loss_on_hand_built_maps():
  box = jnp.array([[[0, 0, 8, 8], [0, 0, 0, 0]]])  # one '3' top-left, an empty slot
  cap, valid = jnp.array([[3, 10]]), jnp.array([[True, False]])
  tgt = ttom.gaussian_targets(box, jnp.array([[3, 0]]), valid, 24)
  # attention only on patches outside the box: disjoint supports, JSD = log 2
  outside = jnp.ones((6, 6)).at[:2, :2].set(0.0).ravel()
  loss = ttom.layout_loss(_cross(jnp.stack([outside, outside]) * 0.1), cap, valid, tgt, DCFG)
  np.testing.assert_allclose(loss, np.log(2), rtol=1e-5)
  # heads averaged, upsampled x4 (nearest), then the JSD against the target (numpy)
  h0 = jax.random.uniform(jax.random.key(1), (36,))
  h1 = jax.random.uniform(jax.random.key(2), (36,))
  loss = jax.jit(ttom.layout_loss, static_argnums=4)(_cross(jnp.stack([h0, h1]) * 0.5), cap,
                                                     valid, tgt, DCFG)
  m = np.kron(((np.asarray(h0) + np.asarray(h1)) / 4).reshape(6, 6), np.ones((4, 4)))
  ref = jensenshannon(m.ravel(), np.asarray(tgt[0, 0]).ravel()) ** 2
  np.testing.assert_allclose(loss, ref, rtol=1e-4)


def test_patch_maps_cannot_reach_the_papers_threshold():
  """The best 4 x 4 patch-constant map (the target's patch means, upsampled) against the pixel
  Gaussian: just under 0.05 for a box on the patch grid, above 0.1 off it, so the paper's
  early-stopping threshold (0.03-0.06) does not transfer to 4 x 4 patches (the docs' reason
  for the experiment's threshold)."""
  floors = []
  for box in ([0, 0, 8, 8], [2, 3, 10, 11], [5, 9, 13, 17]):
    g = ttom.gaussian_targets(jnp.array([box]), jnp.array([1]), jnp.array([True]), 24)[0]
    best = jnp.kron(g.reshape(6, 4, 6, 4).mean((1, 3)), jnp.ones((4, 4)))
    floors.append(float(ttom.jsd(best, g)))
  assert 0.03 < floors[0] < 0.05 and min(floors[1:]) > 0.1


def test_box_iou():
  maps = jnp.zeros((1, 24, 24)).at[0, 0:8, 4:12].set(1.0)  # box shifted 4 px right
  iou = ttom.box_iou(maps, jnp.array([[0, 0, 8, 8]]), jnp.array([True]))
  np.testing.assert_allclose(iou, 32 / 96)


def test_memory_scripted_sequence_with_lfu_eviction():
  e = jnp.eye(4)
  mem = ttom.memory_init(2, 4, 3)
  s0, mem = ttom.memory_insert(mem, e[0], jnp.ones(3))
  s1, mem = ttom.memory_insert(mem, 2 * e[1], 2 * jnp.ones(3))  # keys are unit-normalised
  assert (int(s0), int(s1)) == (0, 1)
  idx, sim, mem = ttom.memory_read(mem, e[0] + 0.1 * e[2])
  assert int(idx) == 0 and abs(float(sim) - 1 / np.sqrt(1.01)) < 1e-6
  np.testing.assert_array_equal(mem.counts, [2, 1])
  s2, mem = ttom.memory_insert(mem, e[2], 3 * jnp.ones(3))  # full: evicts slot 1 (count 1)
  assert int(s2) == 1
  np.testing.assert_array_equal(mem.values[:, 0], [1.0, 3.0])
  idx, sim, mem = ttom.memory_read(mem, e[1])  # e1 is gone: the best is orthogonal
  assert float(sim) == 0.0
  mem = ttom.memory_update(mem, jnp.array(0), 5 * jnp.ones(3), jnp.array(0.5))
  np.testing.assert_allclose(mem.values[0], (1 + 0.5 * 5) / 1.5)  # (old + s new) / (1 + s)
  mem = ttom.memory_delete(mem, jnp.array(0))
  np.testing.assert_array_equal(mem.valid, [False, True])
  s3, mem = ttom.memory_insert(mem, e[3], jnp.zeros(3))  # an empty slot before eviction
  assert int(s3) == 0
  np.testing.assert_array_equal(ttom.choose_strategy(jnp.array([0.99, 0.9, 0.2]), 0.95, 0.8),
                                [ttom.LOAD_ONLY, ttom.LOAD_UPDATE, ttom.OPTIMISE])
  _, sim, empty = ttom.memory_read(ttom.memory_init(2, 4, 3), e[0])
  assert float(sim) == -np.inf and int(empty.counts.sum()) == 0


@pytest.fixture(scope="module")
def setup():
  net = ttom.make_dit(DCFG, 0)
  sched = ddpm.make_schedule(6, "cosine")
  cap = jnp.array([[3, 7], [3, 7]])
  valid = jnp.ones((2, 2), bool)
  boxes = jnp.array([[[0, 0, 8, 8], [12, 12, 20, 20]]] * 2)
  tgt = ttom.gaussian_targets(boxes, cap, valid, 24)
  return net, sched, cap, valid, tgt


@pytest.mark.parametrize("mode", ["base", "lora"])
def test_hooks_without_updates_are_the_plain_sampler(setup, mode):
  net, sched, cap, valid, tgt = setup
  cfg = ttom.TTOConfig(layer=1, loss_layers=(1,), rank=2, opt_steps=2, threshold=10.0)
  carry = ttom.init_carry(jax.random.key(0), net, cfg, cap, valid, tgt)
  plain = ddpm.sample(jax.random.key(1), net, sched, (2, 576), cond=cap)
  x, c = ddpm.sample(jax.random.key(1), net, sched, (2, 576), cond=cap,
                     hook=ttom.make_hook(net, cfg, mode), hook_carry=carry)
  np.testing.assert_allclose(x, plain, atol=1e-5)  # loss < 10: no update; B = 0
  assert int(c.iters) == 0 and float(c.first_loss) > 0


def test_lora_and_guidance_iterate_and_lower_the_loss(setup):
  net, sched, cap, valid, tgt = setup
  cfg = ttom.TTOConfig(layer=1, loss_layers=(1,), rank=2, opt_steps=2, iters=3, lr=0.05,
                       threshold=0.0, guidance_iters=2)
  carry = ttom.init_carry(jax.random.key(0), net, cfg, cap, valid, tgt)
  lora_hook = ttom.make_hook(net, cfg, "lora")  # one hook object: one compile (static arg)
  _, c = ddpm.sample(jax.random.key(1), net, sched, (2, 576), cond=cap, hook=lora_hook,
                     hook_carry=carry)
  assert int(c.iters) == 6 and float(c.last_loss) < float(c.first_loss)
  off = carry._replace(optimise=jnp.asarray(False))  # memory "load only": no iterations
  _, c = ddpm.sample(jax.random.key(1), net, sched, (2, 576), cond=cap, hook=lora_hook,
                     hook_carry=off)
  assert int(c.iters) == 0
  _, c = ddpm.sample(jax.random.key(1), net, sched, (2, 576), cond=cap,
                     hook=ttom.make_hook(net, cfg, "guidance"), hook_carry=carry)
  assert int(c.iters) == 4


def test_bad_input():
  with pytest.raises(ValueError, match="patch must divide"):
    ttom.DiTConfig(canvas=24, patch=5)
  with pytest.raises(ValueError, match="loss_layers"):
    ttom.TTOConfig(loss_layers=())
  with pytest.raises(ValueError, match="mode"):
    ttom.make_hook(ttom.make_dit(DCFG, 0), ttom.TTOConfig(), "edit")
  with pytest.raises(ValueError, match="capacity"):
    ttom.memory_init(0, 4, 3)
