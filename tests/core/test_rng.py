import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import rng


def _lowbias32_np(x):
  # C. Wellons' lowbias32, written independently in NumPy uint32 arithmetic.
  x = np.asarray(x, np.uint32)
  with np.errstate(over="ignore"):
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
  return x


def test_hash_bits_matches_numpy_formula():
  idx = np.arange(1000, dtype=np.uint32)
  k0, k1 = np.uint32(123456789), np.uint32(987654321)
  with np.errstate(over="ignore"):
    expected = _lowbias32_np(_lowbias32_np(idx * np.uint32(0x9E3779B9) + k0) ^ k1)
  got = jax.jit(rng.hash_bits)(jnp.asarray(idx), jnp.uint32(k0), jnp.uint32(k1))
  np.testing.assert_array_equal(np.asarray(got), expected)
  assert _lowbias32_np(np.uint32(0)) == 0  # the hash fixes 0: the golden-ratio step moves it


def test_stream_bits_matches_numpy_formula():
  idx = np.arange(1000, dtype=np.uint32)
  k0, k1 = np.uint32(123456789), np.uint32(987654321)
  with np.errstate(over="ignore"):
    expected = _lowbias32_np((idx * np.uint32(0x9E3779B9) + k0) ^ k1)
  got = jax.jit(rng.stream_bits)(jnp.asarray(idx), jnp.uint32(k0), jnp.uint32(k1))
  np.testing.assert_array_equal(np.asarray(got), expected)


def test_stream_bits_neighbours_and_keys_are_uncorrelated():
  # Adjacent elements of one stream, and one element under consecutive step keys, must look
  # independent: what unbiased stochastic rounding of neighbouring weights, step after step,
  # relies on. 2**16 pairs: the correlation of independent uniforms has std 1/256.
  n = 2**16
  u = lambda b: np.asarray(b, np.float64) / 2**32  # noqa: E731
  k0, k1 = rng.key_words(jax.random.key(11))
  a = u(rng.stream_bits(jnp.arange(n + 1, dtype=jnp.uint32), k0, k1))
  assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 4 / 256
  steps = jax.random.split(jax.random.key(5), 64)
  per_step = np.stack([u(rng.random_bits(k, (1024,))) for k in steps])  # (step, element)
  assert abs(np.corrcoef(per_step[:-1].ravel(), per_step[1:].ravel())[0, 1]) < 4 / 256
  # every one of the 32 bits is set about half the time in both directions
  for bits in (a, per_step.ravel()):
    ones = np.unpackbits((bits * 2**32).astype(np.uint32).view(np.uint8)).mean()
    assert abs(ones - 0.5) < 0.005


def test_random_bits_is_the_stream_of_flat_index_and_roughly_uniform():
  key = jax.random.key(3)
  bits = rng.random_bits(key, (64, 50))
  k0, k1 = rng.key_words(key)
  flat = rng.stream_bits(jnp.arange(64 * 50, dtype=jnp.uint32), k0, k1)
  np.testing.assert_array_equal(bits.reshape(-1), flat)
  u = np.asarray(bits, np.float64) / 2**32
  assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01
  # each of the 32 bits is set about half the time
  ones = np.unpackbits(np.asarray(bits).view(np.uint8)).reshape(-1, 8).mean()
  assert abs(ones - 0.5) < 0.01


def test_key_forms_round_trip():
  key = jax.random.key(7)
  data = jax.random.key_data(key)
  for form in (7, key, data, np.asarray(data)):
    np.testing.assert_array_equal(jax.random.key_data(rng.as_key(form)), data)
    np.testing.assert_array_equal(rng.as_key_data(form), data)
  raw, k1, k2 = rng.split_key_data(data, 3)
  expected = jax.random.split(key, 3)
  np.testing.assert_array_equal(raw, jax.random.key_data(expected[0]))
  np.testing.assert_array_equal(jax.random.key_data(k2), jax.random.key_data(expected[2]))
  assert jax.dtypes.issubdtype(k1.dtype, jax.dtypes.prng_key)


def test_stream_and_leaf_keys():
  a, b = rng.stream_key_data(0, 1), rng.stream_key_data(0, 2)
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(
      a, jax.random.key_data(jax.random.fold_in(jax.random.key(0), 1)))
  same, none = rng.split_leaf_keys(a, 3, needed=False)
  assert same is a and none == [None] * 3
  new, leaves = rng.split_leaf_keys(a, 3)
  assert len(leaves) == 3 and not np.array_equal(new, a)
  assert len({tuple(np.asarray(jax.random.key_data(k))) for k in leaves}) == 3


@pytest.mark.parametrize("bad", [True, "seed"])
def test_as_key_rejects_non_keys(bad):
  with pytest.raises((TypeError, ValueError)):
    rng.as_key(bad)


def test_random_bits_offset_continues_the_stream():
  # Leaves drawn at their offsets in a flattened tree get the concatenation's bits.
  @jax.jit
  def draws(key):
    parts = [rng.random_bits(key, (2, 3)), rng.random_bits(key, (5,), offset=6),
             rng.random_bits(key, (), offset=11)]
    # Indices are uint32: an offset past 2**32 wraps.
    return (rng.random_bits(key, (12,)), jnp.concatenate([x.ravel() for x in parts]),
            rng.random_bits(key, (3,), offset=2**32 + 1))

  whole, parts, wrapped = draws(jax.random.key(4))
  np.testing.assert_array_equal(parts, whole)
  np.testing.assert_array_equal(wrapped, whole[1:4])
