r"""Decoding from a :class:`~jaxlab.models.transformer.Transformer`: a KV cache driven by
jitted incremental steps, greedy / temperature / top-k sampling, beam search,
per-token log-probabilities of a given continuation, and a masked-diffusion
(iterative unmasking) sampler over the same network.

Every function takes the model as a :class:`jaxlab.nn.Net` (or a ``Transformer``,
split into one) and is jit-compiled with its sizes static: one compile per
``(batch, prompt length, max_new_tokens)`` shape. Prompts in a batch share their
length (the cache has one fill level); pad on the left and pass the model a mask
for ragged prompts.

Example:
  >>> out = generate(net, prompt, jax.random.key(0), max_new_tokens=16, temperature=0.0)
  >>> out.tokens, out.log_probs                      # (B, 16) each; greedy
  >>> beams = beam_search(net, prompt, beam_size=4, max_new_tokens=8)
  >>> lp = sequence_log_probs(net, prompt, continuation)   # (B, T_c)

References:
  Pope et al., "Efficiently Scaling Transformer Inference", arXiv:2211.05102, 2022 (KV cache).
  Chang et al., "MaskGIT", arXiv:2202.04200, 2022, and Nie et al., "Large Language
  Diffusion Models" (LLaDA), arXiv:2502.09992, 2025 (confidence-ordered unmasking).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.models.transformer import KVCache, Transformer, init_cache
from jaxlab.nn import Net


class Generation(NamedTuple):
  """Generated tokens ``(B, N)``, the model's log-probability of each (temperature 1,
  0 after EOS) and each sequence's length up to and including its EOS (N without)."""

  tokens: jax.Array
  log_probs: jax.Array
  lengths: jax.Array


def _as_net(model: Any) -> Net:
  if isinstance(model, Net):
    return model
  if isinstance(model, Transformer):
    return Net.create(model)
  raise TypeError(f"model must be a jaxlab.nn.Net or a Transformer, got {type(model).__name__}")


def _check_tokens(name: str, x: Any) -> None:
  if not hasattr(x, "shape") or len(x.shape) != 2 or not jnp.issubdtype(x.dtype, jnp.integer):
    raise TypeError(f"{name} must be an int array (batch, length), got "
                    f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
  if x.shape[1] < 1:
    raise ValueError(f"{name} must hold at least one token, got shape {x.shape}")


def _positive(name: str, value: Any) -> int:
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return value


@functools.partial(jax.jit, static_argnums=(2, 3),
                   static_argnames=("max_len", "cache_dtype", "attend"))
def prefill(net: Net, prompt: jax.Array, max_len: int, cache_dtype: Any = jnp.float32,
            attend: Any = None):
  """Runs ``prompt (B, T)`` into a fresh cache of ``max_len`` slots: returns the
  last position's logits ``(B, V)`` and the cache (length ``T``). Jitted; ``net`` is a
  :class:`Net`.

  ``attend`` (static, hashable): a self-attention hook (see
  :meth:`~jaxlab.models.transformer.Transformer.forward`) called with ``state=None``;
  then the hook's per-layer states come back third: ``(logits, cache, attend_state)``.
  """
  module = net.module()
  cache = init_cache(module.cfg, prompt.shape[0], max_len, cache_dtype)
  out = module.forward(prompt, cache=cache, attend=attend)
  if attend is None:
    return out.logits[:, -1], out.cache
  return out.logits[:, -1], out.cache, out.attend_state


@functools.partial(jax.jit, static_argnames=("attend",))
def decode_step(net: Net, tokens: jax.Array, cache: KVCache, attend: Any = None,
                attend_state: Any = None):
  """One incremental step: ``tokens (B, t)`` appended to ``cache``; returns the logits of
  the last new position ``(B, V)`` and the grown cache. Jitted: one compile per shape.

  With a self-attention hook ``attend`` (static, hashable) and its per-layer
  ``attend_state`` (e.g. from :func:`prefill` with the same hook) every layer attends
  through the hook, and the new states come back third: ``(logits, cache, attend_state)``.
  """
  out = net.module().forward(tokens, cache=cache, attend=attend, attend_state=attend_state)
  if attend is None:
    return out.logits[:, -1], out.cache
  return out.logits[:, -1], out.cache, out.attend_state


def _choose(logits: jax.Array, key: jax.Array, temperature: float, top_k: int | None):
  if temperature == 0.0:
    return jnp.argmax(logits, -1)
  logits = logits / temperature
  if top_k is not None:
    kth = jax.lax.top_k(logits, top_k)[0][..., -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  return jax.random.categorical(key, logits)


def generate(model: Any, prompt: jax.Array, key: jax.Array, max_new_tokens: int, *,
             temperature: float = 1.0, top_k: int | None = None, eos_id: int | None = None,
             pad_id: int = 0, forced: jax.Array | None = None,
             forced_len: jax.Array | None = None) -> Generation:
  """Samples ``max_new_tokens`` tokens after ``prompt (B, T)`` with a KV cache.

  Args:
    model: a :class:`Net` holding a ``Transformer`` (or the module itself).
    prompt: int tokens ``(B, T)``.
    key: PRNG key (unused for greedy decoding).
    max_new_tokens: number of decoding steps ``N``.
    temperature: softmax temperature; ``0.0`` is greedy decoding.
    top_k: sample among the ``top_k`` most likely tokens only (None: all).
    eos_id: a sequence stops at this token; later positions hold ``pad_id``.
    pad_id: filler after EOS.
    forced: int tokens ``(B, N)``; the first ``forced_len[b]`` new tokens of row ``b`` are
      taken from it instead of sampled (teacher-forced, e.g. a revealed part of the answer,
      a different length per row in one compiled program); their log-probs are still
      recorded.
    forced_len: ``(B,)`` ints in ``[0, N]`` (default 0: nothing forced).

  Returns:
    :class:`Generation` with tokens and log-probs ``(B, N)`` and lengths ``(B,)``.
  """
  net = _as_net(model)
  _check_tokens("prompt", prompt)
  _positive("max_new_tokens", max_new_tokens)
  if not isinstance(temperature, (int, float)) or temperature < 0:
    raise ValueError(f"temperature must be a float >= 0 (0: greedy), got {temperature!r}")
  if top_k is not None:
    _positive("top_k", top_k)
  b = prompt.shape[0]
  if (forced is None) != (forced_len is None):
    raise ValueError("forced and forced_len must be given together")
  if forced is None:
    forced, forced_len = jnp.zeros((b, max_new_tokens), prompt.dtype), jnp.zeros(b, jnp.int32)
  elif tuple(jnp.shape(forced)) != (b, max_new_tokens) or jnp.shape(forced_len) != (b,):
    raise ValueError(f"forced must be (batch, max_new_tokens) = {(b, max_new_tokens)} and "
                     f"forced_len (batch,), got {jnp.shape(forced)} and {jnp.shape(forced_len)}")
  return _generate(net, prompt, key, forced, jnp.asarray(forced_len, jnp.int32),
                   max_new_tokens, float(temperature), top_k, eos_id, pad_id)


@functools.partial(jax.jit, static_argnums=(5, 6, 7, 8, 9))
def _generate(net, prompt, key, forced, forced_len, max_new, temperature, top_k, eos_id,
              pad_id):
  logits, cache = prefill(net, prompt, prompt.shape[1] + max_new)
  done = jnp.zeros(prompt.shape[0], bool)

  def step(carry, inp):
    cache, logits, done = carry
    key, i, forced_i = inp
    tok = _choose(logits, key, temperature, top_k)
    tok = jnp.where(i < forced_len, forced_i, tok).astype(prompt.dtype)
    lp = jnp.take_along_axis(jax.nn.log_softmax(logits), tok[:, None], -1)[:, 0]
    tok = jnp.where(done, pad_id, tok)
    lp = jnp.where(done, 0.0, lp)
    if eos_id is not None:
      done = done | (tok == eos_id)
    logits, cache = decode_step(net, tok[:, None], cache)
    return (cache, logits, done), (tok, lp, done)

  keys = jax.random.split(key, max_new)
  _, (toks, lps, dones) = jax.lax.scan(step, (cache, logits, done),
                                       (keys, jnp.arange(max_new), forced.T))
  lengths = max_new - jnp.sum(dones, 0) + jnp.any(dones, 0)  # steps until EOS, EOS included
  return Generation(toks.T, lps.T, lengths.astype(jnp.int32))


def sequence_log_probs(model: Any, prompt: jax.Array, continuation: jax.Array) -> jax.Array:
  """``log p(continuation_i | prompt, continuation_<i)`` per token, ``(B, T_c)``, from
  one uncached forward pass over ``prompt ++ continuation``."""
  net = _as_net(model)
  _check_tokens("prompt", prompt)
  _check_tokens("continuation", continuation)
  if prompt.shape[0] != continuation.shape[0]:
    raise ValueError(f"prompt and continuation batch differ: {prompt.shape[0]} vs "
                     f"{continuation.shape[0]}")
  return _sequence_log_probs(net, prompt, continuation)


@jax.jit
def _sequence_log_probs(net, prompt, continuation):
  tokens = jnp.concatenate([prompt, continuation], 1)
  logp = jax.nn.log_softmax(net(tokens[:, :-1])[:, prompt.shape[1] - 1:])
  return jnp.take_along_axis(logp, continuation[..., None], -1)[..., 0]


class Beams(NamedTuple):
  """Beam search result: ``tokens (B, K, N)`` best first, their total log-probability
  ``scores (B, K)`` (EOS included, nothing after it)."""

  tokens: jax.Array
  scores: jax.Array


def beam_search(model: Any, prompt: jax.Array, beam_size: int, max_new_tokens: int, *,
                eos_id: int | None = None, pad_id: int = 0) -> Beams:
  """The ``beam_size`` continuations of highest total log-probability that beam search
  keeps (exact when ``beam_size >= vocab ** max_new_tokens``); a beam that emitted
  ``eos_id`` is finished: its score stays and it is padded with ``pad_id``."""
  net = _as_net(model)
  _check_tokens("prompt", prompt)
  _positive("beam_size", beam_size)
  _positive("max_new_tokens", max_new_tokens)
  return _beam_search(net, prompt, beam_size, max_new_tokens, eos_id, pad_id)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _beam_search(net, prompt, k, max_new, eos_id, pad_id):
  b = prompt.shape[0]
  logits, cache = prefill(net, prompt, prompt.shape[1] + max_new)
  vocab = logits.shape[-1]
  rep = lambda x, axis: jnp.repeat(x, k, axis=axis)
  cache = cache.replace(k=rep(cache.k, 1), v=rep(cache.v, 1))
  logits = rep(logits, 0)  # (B * K, V)
  scores = jnp.tile(jnp.where(jnp.arange(k) == 0, 0.0, -jnp.inf), (b, 1))  # one live beam
  tokens = jnp.full((b, k, max_new), pad_id, jnp.int32)
  done = jnp.zeros((b, k), bool)

  def step(carry, n):
    cache, logits, scores, tokens, done = carry
    logp = jax.nn.log_softmax(logits).reshape(b, k, vocab)
    if eos_id is not None:  # a finished beam continues only with a free pad
      logp = jnp.where(done[..., None], jnp.where(jnp.arange(vocab) == pad_id, 0.0, -jnp.inf),
                       logp)
    scores, flat = jax.lax.top_k((scores[..., None] + logp).reshape(b, k * vocab), k)
    beam, tok = flat // vocab, flat % vocab
    tokens = jnp.take_along_axis(tokens, beam[..., None], 1).at[:, :, n].set(tok)
    done = jnp.take_along_axis(done, beam, 1)
    if eos_id is not None:
      done = done | (tok == eos_id)
    rows = (jnp.arange(b)[:, None] * k + beam).reshape(-1)
    cache = cache.replace(k=cache.k[:, rows], v=cache.v[:, rows])
    logits, cache = decode_step(net, tok.reshape(-1, 1), cache)
    return (cache, logits, scores, tokens, done), None

  carry = (cache, logits, scores, tokens, done)
  (_, _, scores, tokens, _), _ = jax.lax.scan(step, carry, jnp.arange(max_new))
  return Beams(tokens, scores)


def unmask_sample(model: Any, prompt: jax.Array, key: jax.Array, length: int, steps: int,
                  mask_id: int, *, temperature: float = 1.0) -> jax.Array:
  """Masked-diffusion sampling: ``length`` tokens after ``prompt``, all ``mask_id`` at
  first, filled in ``steps`` rounds of bidirectional forward passes.

  Each round samples a token at every masked position and keeps the ``r`` most
  confident (highest sampled probability), ``r`` spreading the masked positions evenly
  over the remaining rounds (MaskGIT / LLaDA's low-confidence remasking); ``mask_id``
  itself is never predicted. Returns the
  filled tokens ``(B, length)``. The network must be trained to predict masked tokens
  with ``causal=False``.
  """
  net = _as_net(model)
  _check_tokens("prompt", prompt)
  _positive("length", length)
  _positive("steps", steps)
  if steps > length:
    raise ValueError(f"steps must be <= length (each round unmasks at least one token), got "
                     f"steps={steps}, length={length}")
  if not isinstance(temperature, (int, float)) or temperature < 0:
    raise ValueError(f"temperature must be a float >= 0 (0: argmax), got {temperature!r}")
  return _unmask_sample(net, prompt, key, length, steps, mask_id, float(temperature))


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _unmask_sample(net, prompt, key, length, steps, mask_id, temperature):
  b, t = prompt.shape
  x = jnp.full((b, length), mask_id, prompt.dtype)

  def step(x, inp):
    i, key = inp
    logits = net(jnp.concatenate([prompt, x], 1), causal=False)[:, t:]
    logits = logits.at[..., mask_id].set(-jnp.inf)  # the mask token is never a prediction
    tok = _choose(logits, key, temperature, None)
    conf = jnp.take_along_axis(jax.nn.softmax(logits), tok[..., None], -1)[..., 0]
    masked = x == mask_id
    conf = jnp.where(masked, conf, -jnp.inf)
    remaining = jnp.sum(masked, -1)  # same for every row: each round unmasks r per row
    r = remaining // (steps - i)  # the last round unmasks everything left
    rank = jnp.argsort(jnp.argsort(-conf, -1), -1)  # 0 = most confident
    keep = masked & (rank < r[:, None])
    return jnp.where(keep, tok, x), None

  x, _ = jax.lax.scan(step, x, (jnp.arange(steps), jax.random.split(key, steps)))
  return x
