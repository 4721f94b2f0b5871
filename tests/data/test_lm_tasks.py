"""Language-model tasks and corpora: answers checked in Python, statistics against exact values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import lm_tasks as lt


def _rows(data, tok=lt.TOKENIZER_DIGITS):
  return [tok.decode(r).split() for r in np.asarray(data.tokens)]


def test_tokenizer_round_trip_and_errors():
  tok = lt.Tokenizer(["a", "b", "c"])
  ids = tok.encode("<bos> a c <sep> b <eos>")
  np.testing.assert_array_equal(ids, [lt.BOS, 5, 7, lt.SEP, 6, lt.EOS])
  assert tok.decode(np.append(ids, [lt.PAD, lt.PAD])) == "<bos> a c <sep> b <eos>"
  assert tok.vocab_size == 8
  with pytest.raises(ValueError, match="unknown words"):
    tok.encode("a d")
  with pytest.raises(ValueError, match="distinct"):
    lt.Tokenizer(["a", "a"])


@pytest.mark.parametrize("task,answer", [
    (lt.sort_task, sorted), (lt.reverse_task, lambda x: x[::-1]),
    (lt.modular_sum_task, lambda x: [str(sum(int(d) for d in x) % 10)])])
def test_algorithmic_tasks_by_hand(task, answer):
  data = task(jax.random.key(0), num=20, length=5)
  for row, mask in zip(_rows(data), np.asarray(data.loss_mask), strict=True):
    assert row[0] == "<bos>" and row[6] == "<sep>" and row[-1] == "<eos>"
    x, y = row[1:6], row[7:-1]
    assert y == list(answer(x)), row
    # the mask covers exactly the positions predicting the answer and EOS
    assert mask.sum() == len(y) + 1 and mask[data.prompt_len - 1] == 1 and mask[:6].sum() == 0


def test_latent_parity_targets_and_reward():
  length = 3
  data = lt.latent_parity(jax.random.key(1), num=64, length=length)
  x = data.tokens[:, 1:1 + length] - lt.FIRST_SYMBOL
  completion = data.tokens[:, data.prompt_len:]  # y z pairs then EOS
  np.testing.assert_allclose(lt.parity_reward(completion, x), 1.0)
  flipped = completion.at[:, 1].set(2 * lt.FIRST_SYMBOL + 1 - completion[:, 1])  # flips z_1
  np.testing.assert_allclose(lt.parity_reward(flipped, x), 0.1)
  short = completion.at[:, 2 * length - 1].set(lt.EOS)  # 2L - 1 bits
  np.testing.assert_allclose(lt.parity_reward(short, x), 0.0)
  junk = completion.at[:, 0].set(lt.SEP)  # unparsable
  np.testing.assert_allclose(lt.parity_reward(junk, x), 0.0)
  # a uniformly random 2L-bit completion is valid with probability 2^-L
  n = 20_000
  bits = jax.random.randint(jax.random.key(2), (n, 2 * length), 0, 2) + lt.FIRST_SYMBOL
  rand = jnp.concatenate([bits, jnp.full((n, 1), lt.EOS)], 1)
  xs = jax.random.randint(jax.random.key(3), (n, length), 0, 2)
  rate = float(jnp.mean(jax.jit(lt.parity_reward)(rand, xs) > 0.5))
  assert abs(rate - 2.0 ** -length) < 4 * np.sqrt(0.125 * 0.875 / n)


def test_domain_text_follows_each_domains_chain():
  chains = lt.markov_domains(jax.random.key(4), num_domains=2, vocab_size=4, branching=2)
  tokens, domains = lt.domain_text(jax.random.key(5), chains, num=4000, length=20)
  assert tokens.shape == (4000, 20) and np.all(np.asarray(tokens[:, 0]) == lt.BOS)
  s = np.asarray(tokens[:, 1:]) - lt.FIRST_SYMBOL
  for d in range(2):
    rows = s[np.asarray(domains) == d]
    counts = np.zeros((4, 4))
    np.add.at(counts, (rows[:, :-1].ravel(), rows[:, 1:].ravel()), 1)
    freq = counts / counts.sum(1, keepdims=True)
    np.testing.assert_allclose(freq, np.asarray(chains[d]), atol=0.03)
  assert abs(float(np.mean(np.asarray(domains))) - 0.5) < 0.05


def test_entropy_rate_known_chains():
  assert float(lt.entropy_rate(jnp.full((4, 4), 0.25))) == pytest.approx(np.log(4))
  cycle = jnp.roll(jnp.eye(3), 1, axis=1)
  assert float(lt.entropy_rate(cycle)) == pytest.approx(0.0, abs=1e-12)
  two = jnp.array([[0.5, 0.5], [1.0, 0.0]])  # stationary (2/3, 1/3): H = 2/3 log 2
  assert float(lt.entropy_rate(two)) == pytest.approx(2 / 3 * np.log(2))


def test_hmm_text_and_facts():
  a = lt.hmm_text(jax.random.key(6), num=8, length=12, num_states=3, vocab_size=6)
  np.testing.assert_array_equal(a, lt.hmm_text(jax.random.key(6), 8, 12, 3, 6))  # seeded
  assert a.shape == (8, 12) and int(a[:, 1:].min()) >= lt.FIRST_SYMBOL
  assert int(a.max()) < lt.FIRST_SYMBOL + 6
  world = lt.fact_world(jax.random.key(7), num_entities=20, num_relations=3, num_answers=5)
  tokens, counts = lt.fact_statements(jax.random.key(8), world, num=5000, zipf_a=1.0)
  assert int(counts.sum()) == 5000 and counts[0] > 5 * counts[-1]  # Zipf: head >> tail
  e = np.asarray(tokens[:, 1]) - lt.FIRST_SYMBOL
  r = np.asarray(tokens[:, 2]) - lt.FIRST_SYMBOL - 20
  a_ = np.asarray(tokens[:, 4]) - lt.FIRST_SYMBOL - 23
  np.testing.assert_array_equal(a_, np.asarray(world.answers)[e, r])
  q = lt.fact_questions(world)
  assert q.tokens.shape == (60, 6) and q.prompt_len == 4
