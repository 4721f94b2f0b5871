"""Planned Diffusion: the mask on hand-drawn sequences, the hybrid loss by hand, the
unmasking schedule against a per-block Python loop (the official code's shape) and the
pure-diffusion special case against decoding.unmask_sample."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.inference import planned_diffusion as pd
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm

# ids: PAD 0, PROMISE 1, END_TOPIC 2, ASYNC 3, END_ASYNC 4, SYNC 5, EOS 6, MASK 7,
# numerals 10..19, other symbols 20+
IDS = pd.PlanTokens(promise=1, end_topic=2, async_start=3, async_end=4, sync=5, eos=6, mask=7,
                    pad=0, numerals=tuple(range(10, 20)), unit=1)
PR, ET, A, EA, S, EOS, M = 1, 2, 3, 4, 5, 6, 7
X, Y, Z, TOPIC, P0 = 20, 21, 22, 23, 24


def _bits(*rows: str) -> np.ndarray:
  return np.array([[c == "1" for c in r.replace(" ", "")] for r in rows])


# prompt, one plan entry, two parallel blocks, EOS
PARALLEL = [P0, PR, TOPIC, 12, ET, A, X, Y, EA, A, Z, EA, EOS]
PARALLEL_MASK = _bits(
    "10000 0000 000 0",   # prompt
    "11000 0000 000 0",   # <promise>
    "11100 0000 000 0",
    "11110 0000 000 0",
    "11111 0000 000 0",   # </topic>
    "11111 1111 000 0",   # block 1: bidirectional, sees the context
    "11111 1111 000 0",
    "11111 1111 000 0",
    "11111 1111 000 0",
    "11111 0000 111 0",   # block 2: not block 1
    "11111 0000 111 0",
    "11111 0000 111 0",
    "11111 0000 000 1")   # EOS: cannot see inside the blocks
# v3: the adjacent blocks merge into one bidirectional block
PARALLEL_DENSE = _bits(
    "10000 0000 000 0", "11000 0000 000 0", "11100 0000 000 0", "11110 0000 000 0",
    "11111 0000 000 0",
    "11111 1111 111 0", "11111 1111 111 0", "11111 1111 111 0", "11111 1111 111 0",
    "11111 1111 111 0", "11111 1111 111 0", "11111 1111 111 0",
    "11111 0000 000 1")
# a block, a sync, a second plan entry and block, EOS
SYNCED = [P0, PR, TOPIC, 11, ET, A, X, EA, S, PR, TOPIC, 11, ET, A, Y, EA, EOS]
SYNCED_MASK = _bits(
    "10000 000 0 0000 000 0",
    "11000 000 0 0000 000 0",
    "11100 000 0 0000 000 0",
    "11110 000 0 0000 000 0",
    "11111 000 0 0000 000 0",
    "11111 111 0 0000 000 0",   # block 1
    "11111 111 0 0000 000 0",
    "11111 111 0 0000 000 0",
    "11111 111 1 0000 000 0",   # <sync/>: block 1 is visible from here on
    "11111 111 1 1000 000 0",
    "11111 111 1 1100 000 0",
    "11111 111 1 1110 000 0",
    "11111 111 1 1111 000 0",
    "11111 111 1 1111 111 0",   # block 2 sees block 1 (after the sync) and itself
    "11111 111 1 1111 111 0",
    "11111 111 1 1111 111 0",
    "11111 111 1 1111 000 1")   # EOS: block 1 yes, block 2 no (no sync after it)


@pytest.mark.parametrize("tokens,dense,expected", [
    (PARALLEL, False, PARALLEL_MASK), (PARALLEL, True, PARALLEL_DENSE),
    (SYNCED, False, SYNCED_MASK), ([P0, PR, TOPIC, 11, ET, EOS], False,
                                   np.tril(np.ones((6, 6), bool)))])
def test_attention_mask_hand_drawn(tokens, dense, expected):
  np.testing.assert_array_equal(pd.attention_mask(np.array(tokens), IDS, dense), expected)


def test_attention_mask_bad_blocks():
  with pytest.raises(ValueError, match="nested"):
    pd.attention_mask(np.array([A, X, A, EA, EA]), IDS)
  with pytest.raises(ValueError, match="never closed"):
    pd.attention_mask(np.array([A, X]), IDS)
  with pytest.raises(TypeError, match="tokens"):
    pd.attention_mask(np.zeros((2, 2), np.int32), IDS)


def test_hybrid_targets_skip_the_blocks():
  labels, weight, content = pd.hybrid_targets(np.array(PARALLEL), 2, IDS)
  # the last prompt token (position 1 is the first plan token here: prompt_len 2 means
  # positions >= 1 carry labels), </topic> predicts EOS across both blocks
  np.testing.assert_array_equal(np.nonzero(weight)[0], [1, 2, 3, 4])
  np.testing.assert_array_equal(labels[[1, 2, 3, 4]], [TOPIC, 12, ET, EOS])
  np.testing.assert_array_equal(np.nonzero(content)[0], [6, 7, 10])
  labels, weight, _ = pd.hybrid_targets(np.array(SYNCED), 1, IDS)
  np.testing.assert_array_equal(np.nonzero(weight)[0], [0, 1, 2, 3, 4, 8, 9, 10, 11, 12])
  assert labels[4] == S and labels[12] == EOS  # both skip a block


def test_hybrid_loss_by_hand():
  # two rows of 4 tokens, vocabulary 3
  batch = pd.HybridBatch(
      tokens=jnp.array([[0, 1, 2, 1], [0, 2, 2, 0]]), attn=None,
      ar_labels=jnp.array([[1, 2, 0, 0], [2, 0, 0, 0]]),
      ar_weight=jnp.array([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]),
      content=jnp.array([[False, False, True, True], [False, True, True, True]]),
      denom=jnp.array([3.0, 2.0]))
  logits = jnp.zeros((2, 4, 3)).at[0, 1].set(jnp.array([0.0, math.log(2), 0.0]))
  logits = logits.at[1, 2, 2].set(math.log(4))  # probs 1/6, 1/6, 4/6
  masked = jnp.array([[False, False, True, False], [False, True, True, False]])
  t = jnp.array([0.5, 0.25])
  row0 = (math.log(4) + math.log(3) / 0.5) / 3  # plan CE log 4; masked token 2 at p = 1/3
  row1 = (math.log(3) + (math.log(3) + math.log(6 / 4)) / 0.25) / 2
  loss, info = pd.hybrid_loss_from_logits(logits, batch, masked, t)
  np.testing.assert_allclose(loss, (row0 + row1) / 2, rtol=1e-6)
  np.testing.assert_allclose(info["loss/plan_ce"], (math.log(4) + math.log(3)) / 2, rtol=1e-6)
  loss_t, _ = pd.hybrid_loss_from_logits(logits, batch, masked, t, weight_plan_by_t=True)
  row0_t = (math.log(4) / 0.5 + math.log(3) / 0.5) / 3
  row1_t = (math.log(3) / 0.25 + (math.log(3) + math.log(6 / 4)) / 0.25) / 2
  np.testing.assert_allclose(loss_t, (row0_t + row1_t) / 2, rtol=1e-6)


def test_noise_masks_only_content_at_rate_t():
  tokens = jnp.full((64, 400), 30)
  content = jnp.broadcast_to(jnp.arange(400) % 2 == 0, tokens.shape)
  x, masked, t = jax.jit(pd.noise, static_argnums=(3,))(jax.random.key(0), tokens, content, M)
  assert not jnp.any(masked & ~content)
  assert jnp.all((x == M) == masked)
  assert jnp.all(t >= 1e-3) and jnp.all(t <= 1.0)
  rate = jnp.sum(masked, 1) / 200
  np.testing.assert_allclose(rate, t, atol=0.12)  # 200 Bernoulli(t) draws per row


def _net(vocab=30, seed=0, sharp=1.0):
  cfg = tfm.TransformerConfig(vocab, 16, 2, 1, 64)
  net = tfm.create(cfg, jax.random.key(seed))
  # a sharper head spreads the confidences (some above 0.9) for the threshold path
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: x * sharp if "head" in jax.tree_util.keystr(p) else x, net.params)
  return net.replace(params=params)


def test_autoregressive_batch_is_next_token_loss_per_row():
  net = _net()
  tokens = jax.random.randint(jax.random.key(1), (3, 9), 8, 30)
  loss_mask = np.zeros((3, 8), np.float32)
  loss_mask[:, 3:] = 1.0
  loss_mask[1, 6:] = 0.0
  batch = jax.tree.map(jnp.asarray, pd.autoregressive_batch(np.asarray(tokens), loss_mask))
  hybrid = jax.jit(lambda n, b: pd.hybrid_loss(n, b, jax.random.key(0), M)[0])
  loss = hybrid(net, batch)
  per_row = jax.jit(jax.vmap(lambda x, m: tfm.next_token_loss(net, x[None], m[None])))(
      tokens, jnp.asarray(loss_mask))
  np.testing.assert_allclose(loss, np.mean(per_row), rtol=1e-5)
  # padding changes nothing
  padded = jax.tree.map(jnp.asarray, pd.pad_batch(pd.autoregressive_batch(
      np.asarray(tokens), loss_mask), 14, 0))
  np.testing.assert_allclose(hybrid(net, padded), loss, rtol=1e-5)


@jax.jit
def _forward(net, x, attn):
  return net.module().forward(x, mask=attn[:, None], causal=False).logits


def _reference_denoise(net, tokens, attn, block_id, steps, tau):
  """The official per-block loop (dream/pd_utils.py's rules), one row at a time."""
  x = np.array(tokens)
  passes = np.zeros(len(x), int)
  for b in range(len(x)):
    left = {k: 0 for k in set(block_id[b]) - {-1}}
    i = 0
    while np.any((x[b] == M) & (block_id[b] >= 0)):
      logits = np.array(_forward(net, jnp.asarray(x[b:b + 1]), jnp.asarray(attn[b:b + 1]))[0])
      logits[:, M] = -np.inf
      probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), -1))
      tok, conf = probs.argmax(-1), probs.max(-1)
      new = x[b].copy()
      for k in sorted(left):
        slots = np.nonzero((block_id[b] == k) & (x[b] == M))[0]
        if len(slots) == 0:
          continue
        base = max(1, len(slots) // (steps[b] - i)) if i < steps[b] else 1
        quota = min(base + left[k], len(slots))
        order = slots[np.argsort(-conf[slots], kind="stable")][:quota]
        keep = [order[0]] + [s for s in order[1:] if tau is None or conf[s] >= tau]
        left[k] = quota - len(keep) if tau is not None else 0
        new[keep] = tok[keep]
      x[b] = new
      i += 1
      passes[b] += 1
  return x, passes


@pytest.mark.parametrize("tau", [None, 0.9])
def test_denoise_blocks_matches_the_per_block_loop(tau):
  net = _net(sharp=300.0)
  prefix = [P0, PR, TOPIC, 16, ET, PR, TOPIC, 12, ET]
  rows, blocks = zip(*[pd.build_scaffold(np.array(prefix), units, IDS)
                       for units in ([6, 2], [4, 4])], strict=True)
  tokens, block_id = np.stack(rows), np.stack(blocks)
  attn = pd.attention_masks(tokens, IDS)
  steps = np.array([3, 2])
  x, passes = pd.denoise_blocks(net, tokens, attn, block_id, steps, num_blocks=2, mask_id=M,
                                threshold=tau)
  ref_x, ref_passes = _reference_denoise(net, tokens, attn, block_id, steps, tau)
  np.testing.assert_array_equal(np.asarray(x), ref_x)
  np.testing.assert_array_equal(np.asarray(passes), ref_passes)
  assert not np.any(np.asarray(x) == M)
  if tau is None:
    np.testing.assert_array_equal(np.asarray(passes), steps)  # the schedule ends on time


def test_one_block_with_full_attention_is_unmask_sample():
  net = _net(sharp=50.0)
  prompt = jax.random.randint(jax.random.key(2), (3, 4), 8, 30)
  length, steps = 10, 4
  x0 = jnp.concatenate([prompt, jnp.full((3, length), M)], 1)
  block = jnp.broadcast_to(jnp.where(jnp.arange(14) >= 4, 0, -1), x0.shape)
  full = jnp.ones((3, 14, 14), bool)
  x, passes = pd.denoise_blocks(net, x0, full, block, jnp.full(3, steps), num_blocks=1,
                                mask_id=M)
  ref = decoding.unmask_sample(net, prompt, jax.random.key(0), length, steps, M,
                               temperature=0.0)
  np.testing.assert_array_equal(np.asarray(x)[:, 4:], np.asarray(ref))
  np.testing.assert_array_equal(np.asarray(passes), [steps] * 3)


def test_parse_plan_and_scaffold():
  plan = np.array([PR, TOPIC, 12, ET, PR, TOPIC, X, 13, ET, EOS, 0, 0])
  assert pd.parse_plan(plan, IDS) == [((TOPIC,), 2), ((TOPIC, X), 3)]
  assert pd.parse_plan(np.array([PR, TOPIC, 12, ET]), IDS) is None  # no EOS
  assert pd.parse_plan(np.array([PR, TOPIC, 10, ET, EOS]), IDS) is None  # zero units
  assert pd.parse_plan(np.array([TOPIC, PR, TOPIC, 12, ET, EOS]), IDS) is None
  assert pd.parse_plan(np.array([EOS]), IDS) is None
  ids4 = pd.PlanTokens(**{**IDS.__dict__, "unit": 2})
  x, blk = pd.build_scaffold(np.array([P0]), [2, 1], ids4)
  np.testing.assert_array_equal(x, [P0, A, M, M, M, M, EA, A, M, M, EA])
  np.testing.assert_array_equal(blk, [-1, -1, 0, 0, 0, 0, -1, -1, 1, 1, -1])


def test_planned_decode_counts_passes():
  net = _net(sharp=300.0)
  prompt = np.array([[P0, P0], [P0, X]])
  plan_tokens = np.array([[PR, TOPIC, 14, ET, PR, Y, 11, ET, EOS, 0],
                          [PR, TOPIC, 12, ET, EOS, 0, 0, 0, 0, 0]])
  plan = decoding.Generation(jnp.asarray(plan_tokens), jnp.zeros((2, 10)),
                             jnp.array([9, 5]))
  out = pd.planned_decode(net, prompt, IDS, 10, step_ratio=0.5, plan=plan, max_blocks=2)
  assert out.spans == [[((TOPIC,), 4), ((Y,), 1)], [((TOPIC,), 2)]]
  assert [len(c) for c in out.contents[0]] == [4, 1] and len(out.contents[1][0]) == 2
  np.testing.assert_array_equal(out.plan_passes, [9, 5])
  np.testing.assert_array_equal(out.denoise_passes, [2, 1])  # ceil(0.5 * max_k l_k)
  assert not any(np.any(c == M) for cs in out.contents for c in cs)
  bad = decoding.Generation(jnp.asarray(plan_tokens[:, ::-1].copy()), jnp.zeros((2, 10)),
                            jnp.array([10, 10]))
  out = pd.planned_decode(net, prompt, IDS, 10, plan=bad, max_blocks=2)
  assert out.spans == [None, None] and list(out.denoise_passes) == [0, 0]


def test_bad_input():
  with pytest.raises(ValueError, match="unit"):
    pd.PlanTokens(**{**IDS.__dict__, "unit": 0})
  with pytest.raises(ValueError, match="numerals"):
    pd.PlanTokens(**{**IDS.__dict__, "numerals": (1, 2)})
  net = _net()
  with pytest.raises(ValueError, match="step_ratio"):
    pd.planned_decode(net, np.zeros((1, 2), np.int32), IDS, 8, step_ratio=1.5)
  with pytest.raises(ValueError, match="threshold"):
    pd.denoise_blocks(net, np.zeros((1, 3), np.int32), np.ones((1, 3, 3), bool),
                      np.zeros((1, 3), np.int32), np.ones(1, np.int32), num_blocks=1,
                      mask_id=M, threshold=2.0)
  with pytest.raises(ValueError, match="num_blocks"):
    pd.denoise_blocks(net, np.zeros((1, 3), np.int32), np.ones((1, 3, 3), bool),
                      np.zeros((1, 3), np.int32), np.ones(1, np.int32), num_blocks=0,
                      mask_id=M)
  with pytest.raises(ValueError, match="lengths"):
    pd.hybrid_batch(np.array([PARALLEL]), np.array([20]), 1, IDS)
  with pytest.raises(ValueError, match="length"):
    pd.pad_batch(pd.autoregressive_batch(np.zeros((1, 4), np.int32), np.ones((1, 3))), 3, 0)
