r"""Synthetic long-context key-value recall (FreeKV's test bed), generated from a key.

A row is ``BOS``, a ``context`` of filler tokens with ``pairs`` key-value pairs
written at random non-overlapping places, ``SEP``, then ``queries`` of those pairs
again in a random order (the multi-query associative recall of Arora et al.'s
Zoology, with a haystack of filler between the pairs)::

  BOS  f f k_3 v_3 f f f k_1 v_1 f ... f  SEP  k_1 v_1  k_3 v_3 ...
       |<------------- context ------------->|       |<- queries ->|

Each value is ``value_len`` tokens. The loss mask marks the positions that predict a
value token of the query section (the first from its key, the others from the value
tokens before them): nothing there can be guessed from nearby tokens, so a model
must find the pair's first appearance, anywhere in the context. Keys within a row are
distinct; values are drawn with replacement.

Token ids: :mod:`jaxlab.data.lm_tasks`' five specials, then ``num_keys`` keys,
``num_values`` values and ``num_filler`` filler tokens (:func:`vocab_size`).

Example:
  >>> data = kv_recall_rows(jax.random.key(0), 8, context=512, pairs=32, queries=16)
  >>> data.tokens.shape, data.loss_mask.shape, data.prompt_len     # (8, 546) (8, 545) 514

References:
  Arora et al., "Zoology: Measuring and Improving Recall in Efficient Language
  Models", arXiv:2312.04927, 2023 (multi-query associative recall).
  Liu et al., "FreeKV: Boosting KV Cache Retrieval for Efficient LLM Inference",
  arXiv:2505.13109, 2025 (the method this test bed is for).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.data.lm_tasks import BOS, FIRST_SYMBOL, SEP, SeqData

__all__ = ["kv_recall_rows", "token_ranges", "vocab_size"]


def _positive(name: str, value, minimum: int = 1) -> int:
  if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return value


def token_ranges(num_keys: int, num_values: int, num_filler: int) -> dict[str, tuple[int, int]]:
  """``{"keys": (first, stop), "values": ..., "filler": ...}``: each kind's id range."""
  k0 = FIRST_SYMBOL
  v0 = k0 + num_keys
  f0 = v0 + num_values
  return {"keys": (k0, v0), "values": (v0, f0), "filler": (f0, f0 + num_filler)}


def vocab_size(num_keys: int = 64, num_values: int = 64, num_filler: int = 16) -> int:
  """Number of token ids the rows use (the specials included)."""
  return FIRST_SYMBOL + num_keys + num_values + num_filler


def kv_recall_rows(key: jax.Array, num: int, *, context: int, pairs: int, queries: int,
                   num_keys: int = 64, num_values: int = 64, num_filler: int = 16,
                   value_len: int = 1, joint: bool = False) -> SeqData:
  """``num`` recall rows (see the module docstring).

  Args:
    key: PRNG key.
    num: rows.
    context: tokens between ``BOS`` and ``SEP``; a multiple of ``1 + value_len`` slots
      of which ``pairs`` hold a pair.
    pairs: key-value pairs written in the context (``<= num_keys`` and at most the
      context's slots).
    queries: pairs asked again after ``SEP`` (``<= pairs``).
    num_keys, num_values, num_filler: vocabulary of each kind.
    value_len: tokens per value.

  Returns:
    :class:`~jaxlab.data.lm_tasks.SeqData`: tokens ``(num, 2 + context + queries * (1 +
    value_len))``, the loss mask over the query section's value tokens, and
    ``prompt_len = 2 + context`` (``BOS``, the context, ``SEP``).
  """
  for name, value in (("num", num), ("context", context), ("pairs", pairs),
                      ("queries", queries), ("num_keys", num_keys), ("num_values", num_values),
                      ("num_filler", num_filler), ("value_len", value_len)):
    _positive(name, value)
  width = 1 + value_len
  if context % width:
    raise ValueError(f"context must be a multiple of 1 + value_len = {width}, got {context}")
  slots = context // width
  if pairs > min(num_keys, slots):
    raise ValueError(f"pairs must be <= num_keys = {num_keys} and <= context slots = {slots}, "
                     f"got {pairs}")
  if queries > pairs:
    raise ValueError(f"queries must be <= pairs = {pairs}, got {queries}")
  ranges = token_ranges(num_keys, num_values, num_filler)

  def row(k):
    k_key, k_val, k_slot, k_fill, k_q = jax.random.split(k, 5)
    keys = ranges["keys"][0] + jax.random.permutation(k_key, num_keys)[:pairs]
    values = ranges["values"][0] + jax.random.randint(k_val, (pairs, value_len), 0, num_values)
    pair_tokens = jnp.concatenate([keys[:, None], values], 1)  # (pairs, width)
    where = jax.random.permutation(k_slot, slots)[:pairs]  # the slots holding a pair
    body = ranges["filler"][0] + jax.random.randint(k_fill, (slots, width), 0, num_filler)
    if joint:
      ent = ranges["filler"][1] + (keys - ranges["keys"][0]) * num_values + values[:, 0] - ranges["values"][0]
      body = body.at[where, 0].set(ent).reshape(-1)
    else:
      body = body.at[where].set(pair_tokens).reshape(-1)
    asked = jax.random.permutation(k_q, pairs)[:queries]
    tail = pair_tokens[asked].reshape(-1)
    return jnp.concatenate([jnp.array([BOS]), body, jnp.array([SEP]), tail]).astype(jnp.int32)

  tokens = jax.vmap(row)(jax.random.split(key, num))
  prompt_len = 2 + context
  t = tokens.shape[1]
  # position p predicts token p + 1: a value token of the query section
  target = jnp.arange(1, t)
  is_value = (target >= prompt_len) & ((target - prompt_len) % width != 0)
  mask = jnp.broadcast_to(is_value.astype(jnp.float32), (num, t - 1))
  return SeqData(tokens, mask, prompt_len)
