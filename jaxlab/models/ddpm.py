r"""A small DDPM (denoising diffusion probabilistic model) in flax nnx.

Forward process with a fixed schedule :math:`\beta_1, \dots, \beta_T` (stored 0-indexed,
``t = 0 .. T-1``), :math:`\alpha_t = 1 - \beta_t`, :math:`\bar\alpha_t = \prod_{s \le t} \alpha_s`:

.. math::
  q(x_t \mid x_0) = \mathcal N\big(\sqrt{\bar\alpha_t}\, x_0,\ (1 - \bar\alpha_t) I\big),
  \qquad x_t = \sqrt{\bar\alpha_t}\, x_0 + \sqrt{1 - \bar\alpha_t}\, \epsilon.

An MLP :math:`\epsilon_\theta(x_t, t)` (:class:`EpsMLP`, for 2-D points or flattened
8x8 images) is trained with the simple epsilon-prediction loss of Ho et al. (Eq. 14):

.. math::
  L(\theta) = \mathbb E_{x_0, t, \epsilon}\
    \tfrac1D \lVert \epsilon_\theta(x_t, t) - \epsilon \rVert^2 ,
  \quad t \sim \mathcal U\{0, \dots, T-1\},

(mean over the ``D`` features, as in diffusers' ``mse_loss``; :func:`per_sample_eps_error`
gives the per-sample term that Diffusion-DPO and alpha-DPO compare). The ancestral
sampler (Ho et al., Algorithm 2) runs :math:`t = T-1, \dots, 0`:

.. math::
  x_{t-1} = \frac{1}{\sqrt{\alpha_t}}\Big(x_t - \frac{\beta_t}{\sqrt{1 - \bar\alpha_t}}
    \epsilon_\theta(x_t, t)\Big) + \sigma_t z, \qquad
  \sigma_t^2 = \tilde\beta_t = \frac{1 - \bar\alpha_{t-1}}{1 - \bar\alpha_t}\beta_t,

with ``z = 0`` at the last step. (Ho et al. report ``sigma_t^2 = beta_t`` and
``tilde beta_t`` work about equally; the posterior variance is used here because it
adds less noise at the final steps of a short chain.)

Networks are held as :class:`jaxlab.nn.Net` (static graph + parameter pytree),
so training (:func:`fit`, one jitted ``lax.scan``) and sampling (:func:`sample`) work
on plain pytrees and vmap over seeds.

Example:
  >>> schedule = make_schedule(100, "cosine")
  >>> net = Net.create(EpsMLP(2, (128, 128, 128), rngs=nnx.Rngs(0)))
  >>> data = jax.random.normal(jax.random.key(1), (4096, 2)) * 0.5 + 1.0
  >>> net, losses = fit(jax.random.key(2), net, schedule, data, steps=500, batch_size=256)
  >>> x = sample(jax.random.key(3), net, schedule, (1000, 2))   # about N(1, 0.5^2)

References:
  Ho, Jain, Abbeel, "Denoising Diffusion Probabilistic Models", NeurIPS 2020,
  arXiv:2006.11239.
  Nichol, Dhariwal, "Improved Denoising Diffusion Probabilistic Models", ICML 2021,
  arXiv:2102.09672 (cosine schedule).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.flatten_util import ravel_pytree

from jaxlab.core.checks import check_int
from jaxlab.nn import Net
from jaxlab.training.fit import fit as train_fit
from jaxlab.training.fit import minibatch_sampler

SCHEDULES = ("linear", "cosine")


class Schedule(NamedTuple):
  """A fixed noise schedule; every field has shape ``(T,)``, index ``t = 0 .. T-1``."""

  betas: jax.Array  # beta_t
  alphas: jax.Array  # 1 - beta_t
  alphas_cumprod: jax.Array  # bar alpha_t = prod_{s <= t} alpha_s

  @property
  def num_steps(self) -> int:
    return self.betas.shape[0]


def linear_betas(num_steps: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> jax.Array:
  """Ho et al.'s linear schedule ``beta_t`` from ``beta_start`` to ``beta_end``.

  The defaults are DDPM's for ``T = 1000``; for a short chain scale both up
  (e.g. ``x 1000 / T``) so that ``bar alpha_{T-1}`` still reaches about 0.

  Args:
    num_steps: ``T``.
    beta_start: ``beta`` at ``t = 0``, in ``(0, 1)``.
    beta_end: ``beta`` at ``t = T-1``, in ``[beta_start, 1)``.

  Returns:
    ``(T,)`` float32 betas.
  """
  check_int(num_steps, "num_steps", lo=1)
  if not 0.0 < beta_start <= beta_end < 1.0:
    raise ValueError("need 0 < beta_start <= beta_end < 1, got "
                     f"beta_start={beta_start}, beta_end={beta_end}")
  return jnp.linspace(beta_start, beta_end, num_steps, dtype=jnp.float32)


def cosine_betas(num_steps: int, s: float = 0.008, max_beta: float = 0.999) -> jax.Array:
  r"""Nichol & Dhariwal's cosine schedule.

  :math:`\bar\alpha(u) = \cos^2\big(\tfrac{u/T + s}{1 + s}\tfrac{\pi}{2}\big) / \bar\alpha(0)`,
  :math:`\beta_t = \min(1 - \bar\alpha(t+1) / \bar\alpha(t), \text{max\_beta})`.

  Args:
    num_steps: ``T``.
    s: offset that keeps ``beta`` near ``t = 0`` from being too small.
    max_beta: clip, in ``(0, 1]``, against the singularity at ``t = T``.

  Returns:
    ``(T,)`` float32 betas.
  """
  check_int(num_steps, "num_steps", lo=1)
  if not 0.0 < max_beta <= 1.0 or s < 0:
    raise ValueError(f"need 0 < max_beta <= 1 and s >= 0, got max_beta={max_beta}, s={s}")
  f = lambda u: math.cos((u / num_steps + s) / (1 + s) * math.pi / 2) ** 2
  return jnp.asarray([min(1 - f(i + 1) / f(i), max_beta) for i in range(num_steps)],
                     jnp.float32)


def make_schedule(num_steps: int, kind: str = "cosine", **kwargs) -> Schedule:
  """A :class:`Schedule` from :func:`linear_betas` or :func:`cosine_betas`.

  Args:
    num_steps: ``T``.
    kind: ``"linear"`` or ``"cosine"``.
    **kwargs: passed to the beta function (``beta_start``/``beta_end`` or ``s``/``max_beta``).

  Returns:
    The schedule (betas, alphas, alphas_cumprod).
  """
  if kind not in SCHEDULES:
    raise ValueError(f"kind must be one of {SCHEDULES}, got {kind!r}")
  betas = (linear_betas if kind == "linear" else cosine_betas)(num_steps, **kwargs)
  alphas = 1.0 - betas
  return Schedule(betas=betas, alphas=alphas, alphas_cumprod=jnp.cumprod(alphas))


def q_sample(schedule: Schedule, x0: jax.Array, t: jax.Array, noise: jax.Array) -> jax.Array:
  """``x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise`` for per-row timesteps ``t``.

  Args:
    schedule: the noise schedule.
    x0: ``(B, D)`` clean data.
    t: ``(B,)`` integer timesteps in ``[0, T)``.
    noise: ``(B, D)`` standard normal noise.

  Returns:
    ``(B, D)`` noised data.
  """
  abar = schedule.alphas_cumprod[t][:, None]
  return jnp.sqrt(abar) * x0 + jnp.sqrt(1.0 - abar) * noise


def timestep_embedding(t: jax.Array, dim: int, max_period: float = 10_000.0) -> jax.Array:
  """Transformer-style sinusoidal features of integer timesteps, ``(B,) -> (B, dim)``."""
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
  args = t.astype(jnp.float32)[:, None] * freqs[None]
  return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


class EpsMLP(nnx.Module):
  """Noise predictor ``eps_theta(x_t, t)``: an MLP whose hidden layers see the time.

  ``h_0 = x``; ``h_{i+1} = SiLU(W_i h_i + U_i e(t))`` with ``e(t)`` a learned map
  (Linear-SiLU-Linear) of sinusoidal features; the output layer is linear.

  Args:
    data_dim: features per sample (2 for points, 64 for flattened 8x8 images).
    hidden_dims: widths of the hidden layers.
    time_dim: width of the time embedding (even).
    rngs: ``nnx.Rngs`` for the initializers.
  """

  def __init__(self, data_dim: int, hidden_dims: Sequence[int] = (128, 128, 128),
               time_dim: int = 64, *, rngs: nnx.Rngs):
    for name, value in (("data_dim", data_dim), ("time_dim", time_dim)):
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if time_dim % 2:
      raise ValueError(f"time_dim must be even, got {time_dim}")
    hidden_dims = tuple(hidden_dims)
    if not hidden_dims or any(not isinstance(h, int) or h < 1 for h in hidden_dims):
      raise ValueError(f"hidden_dims must be positive ints, got {hidden_dims!r}")
    self.time_dim = time_dim
    self.time_in = nnx.Linear(time_dim, time_dim, rngs=rngs)
    self.time_out = nnx.Linear(time_dim, time_dim, rngs=rngs)
    dims = [data_dim, *hidden_dims]
    self.layers = nnx.List(
        [nnx.Linear(a, b, rngs=rngs) for a, b in zip(dims[:-1], dims[1:], strict=True)])
    self.time_proj = nnx.List(
        [nnx.Linear(time_dim, b, use_bias=False, rngs=rngs) for b in hidden_dims])
    self.out = nnx.Linear(dims[-1], data_dim, rngs=rngs)

  def __call__(self, x: jax.Array, t: jax.Array) -> jax.Array:
    e = self.time_out(jax.nn.silu(self.time_in(timestep_embedding(t, self.time_dim))))
    h = x
    for layer, proj in zip(self.layers, self.time_proj, strict=True):
      h = jax.nn.silu(layer(h) + proj(e))
    return self.out(h)


def per_sample_eps_error(net: Net, schedule: Schedule, x0: jax.Array, t: jax.Array,
                         noise: jax.Array, params: Any = None, *, cond: Any = None) -> jax.Array:
  """``(1/D) ||eps_theta(x_t, t) - noise||^2`` per row: the Diffusion-DPO error term.

  Args:
    net: the noise predictor.
    schedule: the noise schedule.
    x0: ``(B, D)`` clean samples.
    t: ``(B,)`` integer timesteps.
    noise: ``(B, D)`` the noise that forms ``x_t`` and is the regression target.
    params: parameters to use instead of ``net.params``.
    cond: optional conditioning, passed as ``net(x_t, t, cond)`` (``None``: ``net(x_t, t)``).

  Returns:
    ``(B,)`` mean squared errors.
  """
  x_t = q_sample(schedule, x0, t, noise)
  pred = net(x_t, t, params=params) if cond is None else net(x_t, t, cond, params=params)
  return jnp.mean(jnp.square(pred - noise), axis=-1)


def eps_loss(key: jax.Array, net: Net, schedule: Schedule, x0: jax.Array,
             params: Any = None, *, cond: Any = None) -> jax.Array:
  """The simple DDPM loss on a batch: ``t`` uniform, fresh Gaussian noise.

  Args:
    key: PRNG key for ``t`` and the noise.
    net: the noise predictor.
    schedule: the noise schedule.
    x0: ``(B, D)`` clean samples.
    params: parameters to use instead of ``net.params``.
    cond: optional conditioning of each row (e.g. caption tokens), passed to the network.

  Returns:
    Scalar loss (mean of :func:`per_sample_eps_error`).
  """
  k_t, k_eps = jax.random.split(key)
  t = jax.random.randint(k_t, (x0.shape[0],), 0, schedule.num_steps)
  noise = jax.random.normal(k_eps, x0.shape, x0.dtype)
  return jnp.mean(per_sample_eps_error(net, schedule, x0, t, noise, params, cond=cond))


def fit(key: jax.Array, net: Net, schedule: Schedule, data: jax.Array, *, steps: int,
        batch_size: int, learning_rate: float = 1e-3) -> tuple[Net, jax.Array]:
  """Trains ``net`` with :func:`eps_loss` and Adam on minibatches drawn from ``data``.

  One jitted ``lax.scan`` over steps (:func:`jaxlab.training.fit`); minibatches are
  drawn with replacement.

  Args:
    key: PRNG key.
    net: the noise predictor to start from.
    schedule: the noise schedule.
    data: ``(N, D)`` training samples.
    steps: optimizer steps.
    batch_size: samples per step.
    learning_rate: Adam's step size (may be an array, e.g. vmapped).

  Returns:
    ``(net, losses)``: the trained network and the ``(steps,)`` training losses.
  """
  for name, value in (("steps", steps), ("batch_size", batch_size)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"{name} must be a positive int, got {value!r}")
  if jnp.ndim(data) != 2:
    raise ValueError(f"data must have shape (N, D), got {jnp.shape(data)}")
  return _fit(key, net, schedule, jnp.asarray(data, jnp.float32), learning_rate, steps=steps,
              batch_size=batch_size)


@functools.partial(jax.jit, static_argnames=("steps", "batch_size"))
def _fit(key, net, schedule, data, learning_rate, *, steps, batch_size):
  # Adam runs on the raveled parameter vector: the same elementwise update as per leaf,
  # but one fused update instead of one per leaf, which roughly halves XLA compile time.
  flat, unravel = ravel_pytree(net.params)
  loss = lambda p, batch, k: eps_loss(k, net, schedule, batch, params=unravel(p))
  result = train_fit(loss, optax.adam(learning_rate), flat, key, num_steps=steps,
                     sample=minibatch_sampler(data, batch_size))
  return net.replace(params=unravel(result.state.params)), result.losses


def sample(key: jax.Array, net: Net, schedule: Schedule, shape: tuple[int, int],
           params: Any = None, *, cond: Any = None, hook: Callable | None = None,
           hook_carry: Any = None) -> jax.Array | tuple[jax.Array, Any]:
  """Ancestral sampling (Ho et al., Algorithm 2) from ``x_T ~ N(0, I)``.

  With a ``hook``, every step's noise prediction (and, if it likes, the latent) is the
  hook's choice: ``hook(carry, i, x, t, evaluate) -> (x, eps, carry)`` at sampler step
  ``i = 0, 1, ...`` (timestep ``t = T-1-i``, an int scalar), where ``evaluate(x)`` is the
  network's ``eps_theta(x, t)`` and ``carry`` any pytree threaded through the scan from
  ``hook_carry``. The ancestral update is then applied to the returned ``x`` with the
  returned ``eps``. A hook that returns ``(x, evaluate(x), carry)`` reproduces the plain
  sampler bit for bit; TTOM's test-time optimisation (LoRA parameters optimised at the
  first steps) and latent guidance (``x`` moved down a loss gradient) are hooks
  (:mod:`jaxlab.generative.ttom`).

  Args:
    key: PRNG key (the same key gives the same samples).
    net: the noise predictor.
    schedule: the noise schedule.
    shape: ``(num_samples, D)``.
    params: parameters to use instead of ``net.params``.
    cond: optional conditioning (any pytree): the network is called as
      ``net(x, t, cond)`` (e.g. a caption); ``None``: ``net(x, t)``.
    hook: optional step hook (see above); ``None`` is the plain sampler, unchanged.
    hook_carry: the hook's initial carry (a pytree).

  Returns:
    ``shape`` samples ``x_0``; with a ``hook``, ``(samples, final hook carry)``.
  """
  if (not isinstance(shape, tuple) or len(shape) != 2
      or any(not isinstance(s, int) or s < 1 for s in shape)):
    raise ValueError(f"shape must be a tuple (num_samples, D) of positive ints, got {shape!r}")
  if hook is None:
    if hook_carry is not None:
      raise ValueError("hook_carry was given without a hook")
    return _sample(key, net, schedule, params, cond, None, None, shape=shape)
  if not callable(hook):
    raise TypeError(f"hook must be callable, got {type(hook).__name__}")
  return _sample(key, net, schedule, params, cond, hook, hook_carry, shape=shape)


class _SampleCarry(NamedTuple):
  x: jax.Array
  key: jax.Array
  hook: Any = None  # the hook's carry


@functools.partial(jax.jit, static_argnames=("shape", "hook"))
def _sample(key, net, schedule, params, cond, hook, hook_carry, *, shape):
  abar_prev = jnp.concatenate([jnp.ones((1,)), schedule.alphas_cumprod[:-1]])
  # posterior variance tilde beta_t; 0 at t = 0, where no noise is added
  post_var = schedule.betas * (1.0 - abar_prev) / (1.0 - schedule.alphas_cumprod)

  def eps_fn(x, t):
    ts = jnp.full((shape[0],), t)
    return (net(x, ts, params=params) if cond is None
            else net(x, ts, cond, params=params))

  def step(carry: _SampleCarry, it):
    i, t = it
    key, k_z = jax.random.split(carry.key)
    x, inner = carry.x, carry.hook
    if hook is None:
      eps = eps_fn(x, t)
    else:
      x, eps, inner = hook(inner, i, x, t, lambda y: eps_fn(y, t))
    mean = (x - schedule.betas[t] / jnp.sqrt(1.0 - schedule.alphas_cumprod[t]) * eps
            ) / jnp.sqrt(schedule.alphas[t])
    z = jax.random.normal(k_z, shape)
    return _SampleCarry(mean + jnp.sqrt(post_var[t]) * z, key, inner), None

  k_init, k_loop = jax.random.split(key)
  init = _SampleCarry(jax.random.normal(k_init, shape), k_loop, hook_carry)
  n = schedule.num_steps
  final, _ = jax.lax.scan(step, init, (jnp.arange(n), jnp.arange(n - 1, -1, -1)))
  return final.x if hook is None else (final.x, final.hook)
