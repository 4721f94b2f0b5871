"""Keys and counter-hash random bits shared by every package (a leaf module).

Two kinds of randomness live here:

* JAX PRNG keys in the two forms the library stores them: typed keys
  (``jax.random.key``) for computation, raw ``uint32`` key data
  (``jax.random.key_data``) inside pytrees that are checkpointed or compared
  (optax states, agents), so that they stay plain arrays.
* Counter-based hashes: ``stream_bits(index, k0, k1)``, uniform ``uint32`` bits
  for element ``index`` of a stream keyed by two words (one lowbias32 round,
  about eleven integer ops per element), and the two-round ``hash_bits`` (the
  matcher's priorities). Both run inside Pallas kernels, which cannot call
  ``jax.random``; ``random_bits(key, shape)`` is ``stream_bits`` over a whole
  array, so a kernel that knows an element's flat index reproduces it exactly.

This module imports nothing else from jaxlab, so ``kernels_pallas`` may use it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["advance_key", "as_key", "as_key_data", "hash_bits", "key_words", "random_bits",
           "split_key_data", "split_leaf_keys", "stream_bits", "stream_key_data"]


def _is_typed_key(x: Any) -> bool:
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def as_key(key: Any) -> jax.Array:
  """A typed PRNG key from an int seed, a typed key, or raw ``uint32`` key data.

  Example:
    >>> as_key(0)                                # jax.random.key(0)
    >>> as_key(jax.random.key_data(k))           # the same key as k
  """
  if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
    return jax.random.key(int(key))
  if _is_typed_key(key):
    return key
  return jax.random.wrap_key_data(jnp.asarray(key).astype(jnp.uint32))


def as_key_data(seed_or_key: Any) -> jax.Array:
  """Raw ``uint32`` key data from an int seed, a typed key, or key data (passed through)."""
  if isinstance(seed_or_key, (int, np.integer)) and not isinstance(seed_or_key, bool):
    return jax.random.key_data(jax.random.key(int(seed_or_key)))
  if _is_typed_key(seed_or_key):
    return jax.random.key_data(seed_or_key)
  return jnp.asarray(seed_or_key, jnp.uint32)


def split_key_data(rng: jax.Array, num: int) -> tuple[jax.Array, ...]:
  """Splits raw key data: the next raw ``rng`` and ``num - 1`` typed keys.

  The form agents use: the key they carry stays raw data, the keys they
  consume in one update are typed.
  """
  keys = jax.random.split(jax.random.wrap_key_data(rng), num)
  return (jax.random.key_data(keys[0]), *keys[1:])


def stream_key_data(seed: jax.typing.ArrayLike, stream: int) -> jax.Array:
  """Raw key data of stream ``stream`` of ``seed`` (``fold_in``): independent draws per stream.

  Optimizers keep one such key per quantized quantity (gradients, moments,
  weights) in their optax state.
  """
  return jax.random.key_data(jax.random.fold_in(jax.random.key(seed), stream))


def split_leaf_keys(key_data: jax.Array, num_leaves: int,
                    needed: bool = True) -> tuple[jax.Array, list]:
  """Advances raw key data and returns ``(new_key_data, one typed key per leaf)``.

  With ``needed=False`` (e.g. deterministic rounding) the key is passed
  through and the leaf keys are ``None``, so no random work is traced.
  """
  key, sub = advance_key(key_data, needed)
  if not needed:
    return key, [None] * num_leaves
  return key, list(jax.random.split(sub, max(num_leaves, 1)))[:num_leaves]


def advance_key(key_data: jax.Array, needed: bool = True) -> tuple[jax.Array, jax.Array | None]:
  """Advances raw key data by one step: ``(new_key_data, this step's typed key)``.

  The step key keys one :func:`random_bits` stream over a whole flattened
  pytree (element ``i`` of the concatenated leaves draws ``stream_bits(i, ...)``),
  so a fused kernel over the flat buffer draws the same bits. It is the
  ``sub`` key :func:`split_leaf_keys` splits per leaf. With ``needed=False`` the
  key is passed through and the step key is None (no random work traced).
  """
  if not needed:
    return key_data, None
  key, sub = jax.random.split(jax.random.wrap_key_data(key_data))
  return jax.random.key_data(key), sub


def _lowbias32(x: jax.Array) -> jax.Array:
  """C. Wellons' 32-bit integer hash (an avalanching bijection on uint32)."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def key_words(key: Any) -> tuple[jax.Array, jax.Array]:
  """The two ``uint32`` words of a key's data that :func:`stream_bits` and :func:`hash_bits`
  are keyed by."""
  data = jax.random.key_data(as_key(key)).reshape(-1)
  return data[0], data[-1]


def hash_bits(index: jax.Array, k0: jax.Array, k1: jax.Array) -> jax.Array:
  """A two-round keyed hash of ``index`` (uint32): the matcher's random priorities.

  ``h(h(index * phi + k0) ^ k1)`` with ``h`` = lowbias32 and ``phi`` the 32-bit
  golden ratio. Statistically uniform; not a cryptographic or general-purpose
  PRNG. Random bits for rounding use the one-round :func:`stream_bits`, half the
  cost; the matcher keeps two rounds, so its recorded runs reproduce.
  """
  return _lowbias32(_lowbias32(index * jnp.uint32(0x9E3779B9) + k0) ^ k1)


def stream_bits(index: jax.Array, k0: jax.Array, k1: jax.Array) -> jax.Array:
  """Bits number ``index`` (uint32) of the stream keyed by ``(k0, k1)``.

  ``h((index * phi + k0) ^ k1)`` with ``h`` = lowbias32 and ``phi`` the 32-bit
  golden ratio: one finalizer over a keyed Weyl sequence, the construction of
  SplitMix (Steele, Lea and Flood, OOPSLA 2014). For a fixed key the map from
  index to input is a bijection, so a stream never repeats an input within
  ``2**32`` indices, and a fresh key per step gives every element fresh bits.
  Statistically uniform (what unbiased stochastic rounding needs); not a
  cryptographic or general-purpose PRNG. Every stochastic rounding in jaxlab
  (the jnp paths and the fused Pallas kernel) draws these bits.
  """
  return _lowbias32((index * jnp.uint32(0x9E3779B9) + k0) ^ k1)


def random_bits(key: Any, shape: tuple[int, ...], offset: int = 0) -> jax.Array:
  """Uniform ``uint32`` bits: ``stream_bits(offset + flat_index, *key_words(key))``.

  An order of magnitude cheaper than threefry bits on CPU, which matters when
  every optimizer step rounds every parameter several times.

  Args:
    key: typed key, raw key data or int seed.
    shape: shape of the result.
    offset: index of the first element in the key's stream (a Python int), so
      that the leaves of a pytree, each drawn at its offset in the flattened
      tree, get exactly the bits of one draw over the concatenated leaves.
      Indices are uint32 and wrap modulo ``2**32``.

  Example:
    >>> a, b = random_bits(k, (3,)), random_bits(k, (2,), offset=3)
    >>> jnp.concatenate([a, b])  # == random_bits(k, (5,))
  """
  if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
    raise TypeError(f"offset must be an int (an element index), got {offset!r}")
  if offset < 0:
    raise ValueError(f"offset must be >= 0, got {offset}")
  k0, k1 = key_words(key)
  size = int(np.prod(shape)) if shape else 1
  index = lax.iota(jnp.uint32, size)
  if offset:
    index = index + jnp.uint32(int(offset) % 2**32)
  return stream_bits(index.reshape(shape), k0, k1)
