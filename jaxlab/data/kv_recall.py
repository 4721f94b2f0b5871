r"""Synthetic long-context key-value recall (FreeKV's test bed), generated from a key.

A row is ``BOS``, a ``context`` of filler tokens with ``pairs`` dictionary entries
written at random distinct places, ``SEP``, then ``queries`` of those keys, each
followed by its value (a multi-query associative recall, as in Zoology, in a haystack)::

  BOS  f f e(k_3, v_3) f f f e(k_1, v_1) f ... f  SEP  k_1 v_1  k_3 v_3 ...
       |<------------------- context ------------------->|     |<- queries ->|

An entry ``e(k, v)`` is ONE token standing for "key ``k`` = value ``v``" (id
``entry0 + k * num_values + v``). The loss mask marks the positions that predict a value
(each query key's position): nothing near them tells the value, so a model must find the
key's entry, anywhere in the context. Keys within a row are distinct; values are drawn
with replacement.

Why one token per entry: a key followed by a value token ("k v") needs an induction
circuit (a previous-token head composed with a matching head), which a 2-layer
transformer did not form within a CPU-sized training budget in our trials (not
recorded), while one-token entries are learned in a few hundred steps with a curriculum
of growing contexts (``experiments/freekv.py``). Either way the value
exists once, at one place of the context, which is what page retrieval is tested on.

Token ids: :mod:`jaxlab.data.lm_tasks`' five specials, then ``num_keys`` keys,
``num_values`` values, ``num_filler`` filler tokens and ``num_keys * num_values``
entries (:func:`token_ranges`, :func:`vocab_size`).

Example:
  >>> data = kv_recall_rows(jax.random.key(0), 8, context=512, pairs=16, queries=16)
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
  """``{"keys": (first, stop), "values": ..., "filler": ..., "entries": ...}``: the id
  range of each kind of token."""
  k0 = FIRST_SYMBOL
  v0 = k0 + num_keys
  f0 = v0 + num_values
  e0 = f0 + num_filler
  return {"keys": (k0, v0), "values": (v0, f0), "filler": (f0, e0),
          "entries": (e0, e0 + num_keys * num_values)}


def vocab_size(num_keys: int, num_values: int, num_filler: int) -> int:
  """Number of token ids the rows use (the specials included)."""
  return token_ranges(num_keys, num_values, num_filler)["entries"][1]


def kv_recall_rows(key: jax.Array, num: int, *, context: int, pairs: int, queries: int,
                   num_keys: int = 16, num_values: int = 16, num_filler: int = 16) -> SeqData:
  """``num`` recall rows (see the module docstring).

  Args:
    key: PRNG key.
    num: rows.
    context: tokens between ``BOS`` and ``SEP``.
    pairs: entries written in the context (``<= num_keys`` and ``<= context``).
    queries: keys asked after ``SEP`` (``<= pairs``).
    num_keys, num_values, num_filler: vocabulary of each kind.

  Returns:
    :class:`~jaxlab.data.lm_tasks.SeqData`: tokens ``(num, 2 + context + 2 queries)``, the
    loss mask (1 at each query key's position, which predicts its value) and
    ``prompt_len = 2 + context`` (``BOS``, the context, ``SEP``).
  """
  for name, value in (("num", num), ("context", context), ("pairs", pairs),
                      ("queries", queries), ("num_keys", num_keys), ("num_values", num_values),
                      ("num_filler", num_filler)):
    _positive(name, value)
  if pairs > min(num_keys, context):
    raise ValueError(f"pairs must be <= num_keys = {num_keys} and <= context = {context}, "
                     f"got {pairs}")
  if queries > pairs:
    raise ValueError(f"queries must be <= pairs = {pairs}, got {queries}")
  r = token_ranges(num_keys, num_values, num_filler)

  def row(k):
    k_key, k_val, k_slot, k_fill, k_q = jax.random.split(k, 5)
    keys = jax.random.permutation(k_key, num_keys)[:pairs]
    values = jax.random.randint(k_val, (pairs,), 0, num_values)
    where = jax.random.permutation(k_slot, context)[:pairs]  # the entries' places
    body = r["filler"][0] + jax.random.randint(k_fill, (context,), 0, num_filler)
    body = body.at[where].set(r["entries"][0] + keys * num_values + values)
    asked = jax.random.permutation(k_q, pairs)[:queries]
    tail = jnp.stack([r["keys"][0] + keys[asked], r["values"][0] + values[asked]], 1)
    return jnp.concatenate([jnp.array([BOS]), body, jnp.array([SEP]),
                            tail.reshape(-1)]).astype(jnp.int32)

  tokens = jax.vmap(row)(jax.random.split(key, num))
  prompt_len = 2 + context
  pos = jnp.arange(tokens.shape[1] - 1)  # position p predicts token p + 1
  is_key = (pos >= prompt_len) & ((pos - prompt_len) % 2 == 0)
  mask = jnp.broadcast_to(is_key.astype(jnp.float32), (num, tokens.shape[1] - 1))
  return SeqData(tokens, mask, prompt_len)
