r"""Adam under floating-point quantization, as an optax transform.

The quantized Adam step of Tang, Li, Zou (2025), Alg. 1, with the master/worker
model: the gradient arrives quantized, the master updates the moments from it
and stores them quantized, then stores the new weights quantized:

.. math::
  \hat g_t &= Q_G(g_t) \\
  m_t &= Q_M\big(\beta_1 m_{t-1} + (1 - \beta_1) \hat g_t\big) \\
  v_t &= Q_V\big(\beta_2 v_{t-1} + (1 - \beta_2) \hat g_t^2\big) \\
  u_t &= -\eta_t \Big(\frac{m_t / (1 - \beta_1^t)}
          {\sqrt{v_t / (1 - \beta_2^t)} + \epsilon} + \lambda w_{t-1}\Big) \\
  w_t &= Q_W(w_{t-1} + u_t)

With every ``Q`` the identity the arithmetic is written exactly as optax's
``scale_by_adam`` writes it, so the updates are bit-identical to ``optax.adam``
(``optax.adamw`` with weight decay).

Two implementations of one step (``implementation=``): the optax chain of
per-leaf ``jnp`` transforms ("xla"), and the fused Pallas kernel of
:mod:`kernels_pallas.quantized_adam` run once over all leaves flattened into
one float32 buffer ("pallas"); "auto" picks the kernel when the step is
lowered for GPU or TPU. Both keep the same optimizer state and draw the same
stochastic-rounding bits: element ``i`` of the flattened tree (leaves in
``jax.tree.leaves`` order) rounds quantity ``Q`` at step ``t`` with
``stream_bits(i, *key_words(k_Q,t))``, ``k_Q,t`` the step key of ``Q``'s stream
(a function of ``seed``, ``Q`` and ``t``).

References:
  Tang, Li, Zou, "A Convergence Analysis of Adaptive Optimizers under
  Floating-point Quantization", arXiv:2510.21314, ICLR 2026.
  Kingma, Ba, "Adam: A Method for Stochastic Optimization", arXiv:1412.6980.
  Dettmers et al., "8-bit Optimizers via Block-wise Quantization",
  arXiv:2110.02861 (the block-wise compact moment storage).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from jaxlab.core.checks import check_int
from jaxlab.core.rng import advance_key, key_words, stream_key_data
from jaxlab.optim import moment_storage as ms
from jaxlab.optim.transforms import (
  STREAM_MU,
  STREAM_NU,
  add_decayed_weights,
  check_format,
  is_literal_zero,
  leaf_offsets,
  quantize_flat,
  quantize_updates,
  quantize_weights,
)
from jaxlab.quant.float_format import FloatFormat, check_rounding
from kernels_pallas.quantized_adam import QuantFormats, quantized_adam_update_pallas

IMPLEMENTATIONS = ("auto", "pallas", "xla")


class ScaleByQuantizedAdamState(NamedTuple):
  """State of :func:`scale_by_quantized_adam`.

  ``mu`` and ``nu`` have the params' tree structure, one leaf per parameter:
  float arrays (exact or format-quantized) or, with ``moment_storage``, codes.
  ``mu_scale`` / ``nu_scale`` hold the per-block scales of the codes (None
  without block scaling).
  """

  count: jax.Array  # int32 step counter
  key: jax.Array  # raw uint32 key data for stochastic rounding
  mu: Any
  nu: Any
  mu_scale: Any
  nu_scale: Any


@dataclasses.dataclass(frozen=True)
class MomentBuffer:
  """Keeps one moment tree between steps: exact, format-quantized or encoded.

  Static configuration shared by the quantized Adam and Muon rules; all arrays
  live in the optimizer state.
  """

  fmt: FloatFormat | None
  storage: str | None
  rounding: str
  second_moment: bool

  def init(self, params: Any) -> tuple[Any, Any]:
    return ms.init_codes(params, self.storage)

  def load(self, codes: Any, scales: Any, like: Any) -> Any:
    """Decoded moments in the dtype of ``like`` (the incoming updates)."""
    if self.storage is None:
      return codes
    if scales is None:
      scales = jax.tree.map(lambda _: None, codes)
    return jax.tree.map(
        lambda c, s, g: ms.decode(c, s, self.storage, self.second_moment, g.dtype),
        codes, scales, like, is_leaf=lambda x: x is None)

  @property
  def stores_root(self) -> bool:
    """Whether the codes hold ``sqrt(v)`` (a second moment in int8 or float8 storage)."""
    return ms.stores_root(self.storage, self.second_moment)

  def store(self, values: Any, key: Any, old_codes: Any,
            root: bool = False) -> tuple[Any, Any, Any]:
    """Returns ``(codes, scales, stored_values)``: what is kept and what it means.

    ``key`` is this step's key for this buffer from :func:`moment_keys` (None when
    nothing is random): a format rounds every leaf as a slice of the flattened tree with
    one key (bits by flat index, as the fused kernel draws them); compact storage
    encodes each leaf with its own key (``key`` holds one per leaf). With ``root`` (only
    where :attr:`stores_root`) the stored values are the coded roots ``sqrt(v)``.
    """
    if root and not self.stores_root:
      raise ValueError(f"root=True needs a second moment in int8 or float8 storage, got "
                       f"storage={self.storage!r}, second_moment={self.second_moment}")
    leaves, treedef = jax.tree.flatten(values)
    old = treedef.flatten_up_to(old_codes)
    if self.storage is None:
      if self.fmt is None:
        q = leaves
      else:
        q = quantize_flat(leaves, self.fmt, self.rounding, key)
      q = [x.astype(o.dtype) for x, o in zip(q, old, strict=True)]
      tree = jax.tree.unflatten(treedef, q)
      return tree, None, tree
    # Compact storage always rounds stochastically (see moment_storage).
    enc = [ms.encode_and_decode(x, self.storage, "stochastic", k, self.second_moment, x.dtype,
                                root=root)
           for x, k in zip(leaves, list(key), strict=True)]
    codes, scales, stored = ([jax.tree.unflatten(treedef, [e[i] for e in enc])] for i in range(3))
    return codes[0], None if self.storage == "bfloat16" else scales[0], stored[0]


def moment_keys(step_key: jax.Array | None, streams: tuple, storage: str | None,
                num_leaves: int) -> list:
  """This step's key of each moment buffer (stream), as :meth:`MomentBuffer.store` takes it.

  Stream ``s`` (an int, or None for no fold) rounds a format with ``fold_in(step_key, s)``
  and encodes leaf ``i`` of compact storage with ``fold_in(split(step_key, n)[i], s)``.
  Every stream's (and leaf's) fold is one vmapped ``fold_in``: one threefry hash rather
  than one per stream and leaf, the same bits (each hash is a few hundred HLO ops to
  compile).
  """
  if step_key is None:
    return [None] * len(streams)
  base = step_key
  if storage is not None:
    base = jax.random.split(step_key, max(num_leaves, 1))[:num_leaves]
  if all(s is None for s in streams):
    return [base] * len(streams)
  fold = (lambda s: jax.random.fold_in(base, s)) if storage is None else (
      lambda s: jax.vmap(jax.random.fold_in, (0, None))(base, s))
  return list(jax.vmap(fold)(jnp.asarray(streams, jnp.uint32)))


def corrected_momentum(mu: Any, updates: Any, decay: Any, count_inc: jax.Array,
                       nesterov: bool) -> Any:
  """Bias-corrected momentum, or Dozat's Nesterov form, exactly as optax forms it.

  ``m / (1 - b^t)``, or ``b * m / (1 - b^(t+1)) + (1 - b) * g / (1 - b^t)``.
  """
  if not nesterov:
    return optax.tree.bias_correction(mu, decay, count_inc)
  return jax.tree.map(
      lambda m, g: decay * m + (1 - decay) * g,
      optax.tree.bias_correction(mu, decay, optax.safe_increment(count_inc)),
      optax.tree.bias_correction(updates, decay, count_inc),
  )


def scale_by_quantized_adam(
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    eps_root: jax.typing.ArrayLike = 0.0,
    *,
    nesterov: bool = False,
    mu: FloatFormat | None = None,
    nu: FloatFormat | None = None,
    rounding: str = "nearest",
    seed: jax.typing.ArrayLike = 0,
    moment_storage: str | None = None,
) -> optax.GradientTransformation:
  r"""Rescales updates by Adam with quantized (or compactly stored) moments.

  ``m_t = Q_M(b1 m + (1 - b1) g)``, ``v_t = Q_V(b2 v + (1 - b2) g^2)``,
  ``u = m_hat / (sqrt(v_hat + eps_root) + eps)``; with ``nesterov`` the
  numerator is Dozat's ``b1 m_hat' + (1 - b1) g_hat`` as in ``optax``.

  Args:
    b1, b2, eps, eps_root: as in ``optax.scale_by_adam``.
    nesterov: Nesterov (NAdam) momentum.
    mu, nu: formats of the stored first / second moments (None = exact).
    rounding: "nearest", "stochastic" or "truncate", for every quantizer.
    seed: seed of the stochastic rounding streams.
    moment_storage: None, "bfloat16" (a plain cast, no scales), "float8_e4m3fn"
      or "int8" (block-wise absmax scaled, block 256, second moment stored as
      sqrt(v)); always rounded stochastically; exclusive with ``mu`` / ``nu``.
      With int8 or float8 storage and ``eps_root`` a literal 0, ``u`` is formed
      from the coded root as ``m c1 / (sqrt(v) c2 + eps)`` with scalar bias
      corrections ``c1 = 1 / (1 - b1^t)``, ``c2 = 1 / sqrt(1 - b2^t)`` (``m_hat``
      as above with ``nesterov``): the same values up to rounding in the leaf's
      dtype.

  Returns:
    An ``optax.GradientTransformation`` with :class:`ScaleByQuantizedAdamState`.
  """
  check_format(mu, "mu")
  check_format(nu, "nu")
  check_rounding(rounding, need_key=False)
  check_int(seed, "seed")  # fails here, not deep in jax.random.key's trace
  ms.check_storage(moment_storage, mu, nu)
  mu_buf = MomentBuffer(mu, moment_storage, rounding, second_moment=False)
  nu_buf = MomentBuffer(nu, moment_storage, rounding, second_moment=True)

  def init_fn(params):
    mu0, mu_scale = mu_buf.init(params)
    nu0, nu_scale = nu_buf.init(params)
    key = stream_key_data(seed, STREAM_MU)
    return ScaleByQuantizedAdamState(jnp.zeros([], jnp.int32), key, mu0, nu0, mu_scale, nu_scale)

  def update_fn(updates, state, params=None):
    del params
    needs_key = rounding == "stochastic" or moment_storage is not None
    key, step_key = advance_key(state.key, needs_key)
    # int8 / float8 code sqrt(v); with eps_root a literal 0 the denominator is taken
    # from that root (an eps_root array, e.g. under inject_hyperparams, takes the
    # general form).
    from_root = nu_buf.stores_root and is_literal_zero(eps_root)
    mu_prev = mu_buf.load(state.mu, state.mu_scale, updates)
    nu_prev = nu_buf.load(state.nu, state.nu_scale, updates)
    # Moment updates, written as optax.tree.update_moment(_per_elem_norm) does.
    mu_new = jax.tree.map(lambda g, t: (1 - b1) * (g**1) + b1 * t, updates, mu_prev)
    nu_new = jax.tree.map(lambda g, t: (1 - b2) * (g**2) + b2 * t, updates, nu_prev)
    mu_key, nu_key = moment_keys(step_key, (STREAM_MU, STREAM_NU), moment_storage,
                                 len(jax.tree.leaves(updates)))
    mu_codes, mu_scale, mu_t = mu_buf.store(mu_new, mu_key, state.mu)
    nu_codes, nu_scale, nu_t = nu_buf.store(nu_new, nu_key, state.nu, root=from_root)

    count_inc = optax.safe_increment(state.count)
    if from_root:
      # Compact storage has no optax bits to match, so the bias corrections are scalar
      # factors: m / (1 - b1^t) and sqrt(v_hat) = sqrt(v) / sqrt(1 - b2^t) from the coded
      # root, without a per-element division, square and root (the same values up to
      # rounding in the leaf's dtype).
      def scaled(tree, factor):
        return jax.tree.map(lambda x: x * factor.astype(x.dtype), tree)

      mu_hat = (corrected_momentum(mu_t, updates, b1, count_inc, nesterov) if nesterov
                else scaled(mu_t, 1 / (1 - b1 ** count_inc)))
      denom = jax.tree.map(lambda r: r + eps,
                           scaled(nu_t, lax.rsqrt(1 - (b2 ** count_inc).astype(jnp.float32))))
    else:
      mu_hat = corrected_momentum(mu_t, updates, b1, count_inc, nesterov)
      nu_hat = optax.tree.bias_correction(nu_t, b2, count_inc)
      denom = jax.tree.map(lambda v: jnp.sqrt(v + eps_root) + eps, nu_hat)
    new_updates = jax.tree.map(lambda m, d, g: (m / d).astype(g.dtype), mu_hat, denom, updates)
    new_state = ScaleByQuantizedAdamState(count_inc, key, mu_codes, nu_codes, mu_scale, nu_scale)
    return new_updates, new_state

  return optax.GradientTransformation(init_fn, update_fn)


# ----------------------------------------------------------------------------
# The fused implementation: one Pallas kernel for chain(Q_G, rule, decay, lr, Q_W).


def check_implementation(implementation: Any) -> None:
  """Raises ``ValueError`` unless ``implementation`` is one of :data:`IMPLEMENTATIONS`."""
  if not isinstance(implementation, str) or implementation not in IMPLEMENTATIONS:
    raise ValueError(
        f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")


def _fusable(updates: Any, state: Any, params: Any) -> bool:
  """What the kernel covers, judged on static information (structure and dtypes).

  Float32 gradients and weights (the kernel's buffers), float32 moments (every
  floating leaf of the state), ``params`` given (the kernel reads the weights).
  """
  if params is None:
    return False
  leaves = jax.tree.leaves(updates)
  p_leaves = jax.tree.leaves(params)
  floats = [x for x in jax.tree.leaves(state)
            if jnp.issubdtype(getattr(x, "dtype", jnp.int32), jnp.floating)]
  return (bool(leaves) and len(leaves) == len(p_leaves)
          and all(getattr(x, "dtype", None) == jnp.float32 for x in leaves + p_leaves + floats))


def _advance(state: Any, fmt: FloatFormat | None, stochastic: bool):
  """``(new quantize state, step key or None)`` of a ``quantize_updates/_weights`` state."""
  if fmt is None:
    return state, None  # optax.identity(): EmptyState, no stream
  key, step_key = advance_key(state.key, stochastic)
  return state._replace(key=key), step_key


def _words(key: jax.Array | None) -> jax.Array:
  """The two uint32 key words of a stream's step key (zeros for no stream)."""
  if key is None:
    return jnp.zeros(2, jnp.uint32)
  return jnp.stack(key_words(key))


def fused_adam_update(
    updates: Any, state: tuple, params: Any, *,
    learning_rate: optax.ScalarOrSchedule,
    b1: jax.typing.ArrayLike, b2: jax.typing.ArrayLike, eps: jax.typing.ArrayLike,
    weight_decay: jax.typing.ArrayLike,
    grads: FloatFormat | None, weights: FloatFormat | None,
    mu: FloatFormat | None, nu: FloatFormat | None,
    rounding: str, outer: bool, interpret: bool,
) -> tuple[Any, tuple]:
  """One step of ``chain([Q_G,] rule, decay, lr, [Q_W])`` as one kernel over the flat tree.

  Reads and writes the chain's own state (``outer``: the 5-link chain of
  :func:`quantized_adam`; otherwise the 3-link Adam part of ``quantized_muon``),
  advancing every counter and key exactly as the links do, so the two
  implementations are interchangeable step by step.
  """
  if outer:
    qg_state, rule, decay_state, lr_state, qw_state = state
  else:
    rule, decay_state, lr_state = state
    qg_state = qw_state = None
    grads = weights = None  # applied outside (quantized_muon's Q_G / Q_W on all params)
  stochastic = rounding == "stochastic"
  leaves, treedef = jax.tree.flatten(updates)
  flat = lambda tree: jnp.concatenate([x.reshape(-1) for x in treedef.flatten_up_to(tree)])

  # The random streams of G, M, V, W, keyed as quantize_updates, the rule and
  # quantize_weights key them (then by flat index, in the kernel).
  qg_state, g_key = _advance(qg_state, grads, stochastic)
  qw_state, w_key = _advance(qw_state, weights, stochastic)
  rule_key, step_key = advance_key(rule.key, stochastic)
  words = None
  if stochastic:
    fold = lambda stream, fmt: None if fmt is None else jax.random.fold_in(step_key, stream)
    words = jnp.stack([_words(g_key), _words(fold(STREAM_MU, mu)), _words(fold(STREAM_NU, nu)),
                       _words(w_key)])
  # optax.scale_by_learning_rate: a schedule is read at its own count.
  if callable(learning_rate):
    lr = learning_rate(lr_state.count)
    lr_state = lr_state._replace(count=optax.safe_increment(lr_state.count))
  else:
    lr = learning_rate
  count = optax.safe_increment(rule.count)
  out, m_new, v_new = quantized_adam_update_pallas(
      flat(params), flat(updates), flat(rule.mu), flat(rule.nu), step=count, lr=lr, b1=b1,
      b2=b2, eps=eps, weight_decay=None if is_literal_zero(weight_decay) else weight_decay,
      formats=QuantFormats(grads, mu, nu, weights), rounding=rounding, stream_words=words,
      interpret=interpret)

  def unflat(x, like):
    like = treedef.flatten_up_to(like)
    return jax.tree.unflatten(treedef, [
        x[o:o + y.size].reshape(y.shape).astype(y.dtype)
        for o, y in zip(leaf_offsets(like), like, strict=True)])

  rule = rule._replace(count=count, key=rule_key, mu=unflat(m_new, rule.mu),
                       nu=unflat(v_new, rule.nu))
  new_updates = unflat(out, updates)
  if outer:
    return new_updates, (qg_state, rule, decay_state, lr_state, qw_state)
  return new_updates, (rule, decay_state, lr_state)


def with_implementation(
    chain: optax.GradientTransformation, fused_update: Callable[..., Any] | None,
    implementation: str,
) -> optax.GradientTransformationExtraArgs:
  """``chain`` whose update runs ``fused_update`` where ``implementation`` asks for it.

  ``fused_update(updates, state, params, interpret=...)`` must take and return
  ``chain``'s state. None (a configuration the kernel does not cover) gives
  ``chain`` itself. "pallas" runs the kernel (interpreted when lowered for
  CPU), "auto" runs it when lowered for CUDA, ROCm or TPU and ``chain``
  elsewhere (``lax.platform_dependent``: by the platform lowered for, so an
  export for TPU from a CPU host gets the kernel), "xla" always runs ``chain``.
  Per call, trees the kernel does not cover (see :func:`quantized_adam`) run
  ``chain`` whatever ``implementation`` says.
  """
  chain = optax.with_extra_args_support(chain)
  if implementation == "xla" or fused_update is None:
    return chain

  def update_fn(updates, state, params=None, **extra_args):
    def xla(updates, state, params):
      return chain.update(updates, state, params, **extra_args)

    if not _fusable(updates, state, params):
      return xla(updates, state, params)
    kernel = functools.partial(fused_update, interpret=False)
    if implementation == "pallas":
      return lax.platform_dependent(
          updates, state, params, cpu=functools.partial(fused_update, interpret=True),
          default=kernel)
    return lax.platform_dependent(updates, state, params, cuda=kernel, rocm=kernel, tpu=kernel,
                                  default=xla)

  return optax.GradientTransformationExtraArgs(chain.init, update_fn)


def quantized_adam(
    learning_rate: optax.ScalarOrSchedule,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    *,
    nesterov: bool = False,
    weight_decay: jax.typing.ArrayLike = 0.0,
    grads: FloatFormat | None = None,
    weights: FloatFormat | None = None,
    mu: FloatFormat | None = None,
    nu: FloatFormat | None = None,
    rounding: str = "nearest",
    seed: jax.typing.ArrayLike = 0,
    moment_storage: str | None = None,
    implementation: str = "auto",
) -> optax.GradientTransformationExtraArgs:
  r"""Adam (AdamW) with simulated low-precision G, W, M, V or compact moments.

  ``chain(Q_G, scale_by_quantized_adam(Q_M, Q_V), add_decayed_weights,
  scale_by_learning_rate, Q_W)``. With all formats None and no
  ``moment_storage`` the updates equal ``optax.adam`` bit for bit
  (``optax.adamw`` when ``weight_decay`` is given and not a literal 0; a
  traced ``weight_decay`` from ``optax.inject_hyperparams`` always applies the
  decay term, never a Python branch on its value).

  Args:
    learning_rate: scalar or schedule.
    b1, b2, eps: Adam's decay rates and epsilon.
    nesterov: NAdam-style momentum as in ``optax.adam(nesterov=True)``.
    weight_decay: decoupled weight decay (AdamW), multiplied by the lr.
    grads, weights, mu, nu: :class:`~jaxlab.quant.FloatFormat` of each
      quantized quantity, or None for exact.
    rounding: "nearest", "stochastic" or "truncate".
    seed: seed of the stochastic rounding streams (kept in the state).
    moment_storage: None, "bfloat16", "float8_e4m3fn" or "int8".
    implementation: "auto" (default), "pallas" or "xla": how a step runs
      (below). Every choice keeps the same state, so one may change it
      between steps or checkpoints.

  Returns:
    An ``optax.GradientTransformationExtraArgs``.

  Implementations:
    "xla" is the chain above, leaf by leaf in ``jnp``. "pallas" flattens the
    gradients, weights and both moments into one float32 buffer each
    (leaves concatenated in ``jax.tree.leaves`` order), runs the fused kernel
    :func:`kernels_pallas.quantized_adam.quantized_adam_update_pallas` once
    (compiled for GPU/TPU, interpreted when lowered for CPU) and splits the
    results back. "auto" runs the kernel when the step is lowered for CUDA,
    ROCm or TPU and "xla" otherwise (CPU), decided by the platform lowered for
    (``lax.platform_dependent``), not ``jax.default_backend()``.

    The kernel covers Adam(W) with any ``grads``/``weights``/``mu``/``nu``
    formats, every rounding, schedules, weight decay and hyperparameters
    traced by ``optax.inject_hyperparams``. Everything else runs the "xla"
    chain under every ``implementation`` ("pallas" included: it falls back,
    it does not raise): ``nesterov=True``, ``moment_storage``, a gradient,
    parameter or moment leaf that is not float32 (the whole tree then falls
    back), ``update`` called without ``params``, and an empty tree.

    Both draw the same random bits (module docstring) and perform the same
    float32 operations in the same order, so the state (moments, counts,
    keys) and, with ``weights`` set, the update ``Q_W(w + u) - w`` agree bit
    for bit whenever every product is exact (e.g. dyadic hyperparameters and
    formats of short mantissa; tests), the latter unless an ulp of ``u``
    (below) moves a rounding of ``w + u``, which is rare. Otherwise a compiler's fused
    multiply-add may round one product differently, which can move a
    quantized value by one step of its format. Adam's direction ``u`` (the
    update itself when ``weights`` is None) can differ by a float32 ulp or
    two in any case: XLA rewrites the divisions by the bias corrections
    depending on the surrounding program (``x / c`` into ``x * (1 / c)``,
    ``(a / b) / c`` into ``a / (b * c)``), in the chain and in the
    interpreted kernel alike, while Triton and Mosaic divide as written.

  Example:
    >>> opt = quantized_adam(1e-3, weights=FloatFormat.BF16, nu=FloatFormat(8, 7),
    ...                      rounding="stochastic")
    >>> state = opt.init(params)
    >>> updates, state = opt.update(grads, state, params)
    >>> params = optax.apply_updates(params, updates)

  References:
    Tang, Li, Zou, arXiv:2510.21314 (ICLR 2026), Alg. 1.
  """
  check_format(grads, "grads")
  check_format(weights, "weights")
  check_implementation(implementation)
  rule = scale_by_quantized_adam(
      b1, b2, eps, nesterov=nesterov, mu=mu, nu=nu, rounding=rounding, seed=seed,
      moment_storage=moment_storage)
  fused = None
  if not nesterov and moment_storage is None:
    fused = functools.partial(
        fused_adam_update, learning_rate=learning_rate, b1=b1, b2=b2, eps=eps,
        weight_decay=weight_decay, grads=grads, weights=weights, mu=mu, nu=nu,
        rounding=rounding, outer=True)
  chain = optax.chain(
      quantize_updates(grads, rounding=rounding, seed=seed),
      rule,
      # Always in the chain (one state structure; weight_decay may be a tracer
      # under inject_hyperparams), a no-op for a literal 0. A traced 0 adds +-0
      # to an update that is never -0, so it stays bit-identical to adam.
      add_decayed_weights(weight_decay),
      optax.scale_by_learning_rate(learning_rate),
      quantize_weights(weights, rounding=rounding, seed=seed),
  )
  return with_implementation(chain, fused, implementation)
