"""Decoding against uncached references: the KV cache, sampling, beam search, unmasking."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.models import decoding, transformer

CFG = transformer.TransformerConfig(vocab_size=5, d_model=16, num_heads=2, num_layers=2,
                                    seq_len=16)
NET = transformer.create(CFG, jax.random.key(0))
APPLY = jax.jit(lambda net, x, causal=True: net(x, causal=causal), static_argnames="causal")
PROMPT = jnp.array([[1, 2, 3], [4, 0, 2]])


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_cached_steps_equal_uncached_logits(positions):
  net = NET if positions == "rope" else transformer.create(
      transformer.TransformerConfig(5, 16, 2, 2, 16, positions="learned"), jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, 5)
  full = APPLY(net, tokens)
  logits, cache = decoding.prefill(net, tokens[:, :4], max_len=12)
  np.testing.assert_allclose(logits, full[:, 3], rtol=1e-5, atol=1e-5)
  logits, cache = decoding.decode_step(net, tokens[:, 4:6], cache)  # two tokens at once
  np.testing.assert_allclose(logits, full[:, 5], rtol=1e-5, atol=1e-5)
  for i in range(6, 9):
    logits, cache = decoding.decode_step(net, tokens[:, i:i + 1], cache)
    np.testing.assert_allclose(logits, full[:, i], rtol=1e-5, atol=1e-5)
  assert int(cache.length) == 9


def test_greedy_and_sampled_generation_against_uncached_scoring():
  greedy = decoding.generate(NET, PROMPT, jax.random.key(0), 6, temperature=0.0)
  # greedy: every token is the argmax of the uncached model on the prefix so far
  seq = jnp.concatenate([PROMPT, greedy.tokens], 1)
  logits = APPLY(NET, seq[:, :-1])[:, PROMPT.shape[1] - 1:]
  np.testing.assert_array_equal(greedy.tokens, jnp.argmax(logits, -1))
  np.testing.assert_allclose(greedy.log_probs,
                             decoding.sequence_log_probs(NET, PROMPT, greedy.tokens),
                             rtol=1e-5, atol=1e-5)
  # sampling: log-probs are the model's, top_k=1 is greedy, the key matters
  sampled = decoding.generate(NET, PROMPT, jax.random.key(3), 6, temperature=1.5)
  np.testing.assert_allclose(sampled.log_probs,
                             decoding.sequence_log_probs(NET, PROMPT, sampled.tokens),
                             rtol=1e-5, atol=1e-5)
  top1 = decoding.generate(NET, PROMPT, jax.random.key(3), 6, temperature=1.5, top_k=1)
  np.testing.assert_array_equal(top1.tokens, greedy.tokens)
  many = decoding.generate(NET, jnp.tile(PROMPT[:1], (64, 1)), jax.random.key(4), 1)
  p = np.exp(np.asarray(jax.nn.log_softmax(APPLY(NET, PROMPT[:1])[0, -1])))
  counts = np.bincount(np.asarray(many.tokens[:, 0]), minlength=5)
  assert len(set(counts.nonzero()[0])) > 1 and np.all(counts[p < 1e-3] == 0)


def test_eos_stops_a_sequence():
  greedy = decoding.generate(NET, PROMPT, jax.random.key(0), 6, temperature=0.0)
  eos = int(greedy.tokens[0, 2])
  out = decoding.generate(NET, PROMPT, jax.random.key(0), 6, temperature=0.0, eos_id=eos,
                          pad_id=0)
  first = int(np.argmax(np.asarray(greedy.tokens[0]) == eos))
  assert int(out.lengths[0]) == first + 1
  np.testing.assert_array_equal(out.tokens[0, :first + 1], greedy.tokens[0, :first + 1])
  assert np.all(np.asarray(out.tokens[0, first + 1:]) == 0)
  assert np.all(np.asarray(out.log_probs[0, first + 1:]) == 0)


def test_wide_beam_search_is_exhaustive_search():
  n = 3  # 5 ** 3 = 125 continuations, all kept by a 125-wide beam
  beams = decoding.beam_search(NET, PROMPT, beam_size=125, max_new_tokens=n)
  every = jnp.array(list(itertools.product(range(5), repeat=n)))  # (125, n)
  for row in range(2):
    prompts = jnp.tile(PROMPT[row], (125, 1))
    scores = np.asarray(decoding.sequence_log_probs(NET, prompts, every).sum(-1))
    order = np.argsort(-scores, kind="stable")
    np.testing.assert_allclose(beams.scores[row], scores[order], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(beams.tokens[row, :5], every[order[:5]])
  # a 1-wide beam is greedy decoding
  one = decoding.beam_search(NET, PROMPT, beam_size=1, max_new_tokens=4)
  greedy = decoding.generate(NET, PROMPT, jax.random.key(0), 4, temperature=0.0)
  np.testing.assert_array_equal(one.tokens[:, 0], greedy.tokens)


def test_unmask_sampler_fills_every_masked_slot_and_keeps_the_prompt():
  mask_id = 4
  out = decoding.unmask_sample(NET, PROMPT, jax.random.key(0), length=6, steps=3,
                               mask_id=mask_id, temperature=0.0)
  assert out.shape == (2, 6) and not np.any(np.asarray(out) == mask_id)
  # argmax unmasking, one round per token, equals doing the rounds by hand
  x = jnp.full((2, 6), mask_id)
  for _ in range(6):
    logits = APPLY(NET, jnp.concatenate([PROMPT, x], 1), causal=False)[:, 3:]
    logits = logits.at[..., mask_id].set(-jnp.inf)
    conf = jnp.where(x == mask_id, jnp.max(jax.nn.softmax(logits), -1), -jnp.inf)
    pick = jnp.argmax(conf, -1)
    x = x.at[jnp.arange(2), pick].set(jnp.argmax(logits, -1)[jnp.arange(2), pick])
  ref = decoding.unmask_sample(NET, PROMPT, jax.random.key(0), length=6, steps=6,
                               mask_id=mask_id, temperature=0.0)
  np.testing.assert_array_equal(ref, x)


def test_bad_arguments():
  with pytest.raises(TypeError, match="prompt must be an int array"):
    decoding.generate(NET, jnp.zeros((2, 3)), jax.random.key(0), 2)
  with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
    decoding.generate(NET, PROMPT, jax.random.key(0), 0)
  with pytest.raises(ValueError, match="temperature"):
    decoding.generate(NET, PROMPT, jax.random.key(0), 2, temperature=-1.0)
  with pytest.raises(ValueError, match="steps must be <= length"):
    decoding.unmask_sample(NET, PROMPT, jax.random.key(0), length=2, steps=3, mask_id=4)
  with pytest.raises(TypeError, match="model must be"):
    decoding.beam_search(object(), PROMPT, 2, 2)
  with pytest.raises(ValueError, match="max_len"):
    transformer.init_cache(transformer.TransformerConfig(5, 16, 2, 1, 8, positions="learned"),
                           1, 9)


def test_forced_prefix_per_row():
  forced = jnp.array([[0, 1, 2, 3], [3, 3, 3, 3]])
  out = decoding.generate(NET, PROMPT, jax.random.key(0), 4, temperature=0.0, forced=forced,
                          forced_len=jnp.array([2, 0]))
  np.testing.assert_array_equal(out.tokens[0, :2], [0, 1])
  # row 0 continues greedily after its forced prefix; row 1 is plain greedy decoding
  greedy = decoding.generate(NET, jnp.concatenate([PROMPT[:1], forced[:1, :2]], 1),
                             jax.random.key(0), 2, temperature=0.0)
  np.testing.assert_array_equal(out.tokens[0, 2:], greedy.tokens[0])
  plain = decoding.generate(NET, PROMPT, jax.random.key(0), 4, temperature=0.0)
  np.testing.assert_array_equal(out.tokens[1], plain.tokens[1])
  np.testing.assert_allclose(out.log_probs,
                             decoding.sequence_log_probs(NET, PROMPT, out.tokens), rtol=1e-5,
                             atol=1e-5)
