r"""LoRA: low-rank adapters on a network's linear layers, as a separate parameter pytree.

A frozen ``nnx.Linear`` kernel :math:`W \in \mathbb R^{d_{in} \times d_{out}}` (``y = x W + b``,
flax's layout) gets a trainable low-rank update

.. math::
  y = x W + b + s\,\tfrac{\alpha}{r}\, (x A) B, \qquad A \in \mathbb R^{d_{in} \times r},\;
  B \in \mathbb R^{r \times d_{out}},

with :math:`A` drawn uniformly in :math:`\pm 1/\sqrt{d_{in}}` (PEFT's Kaiming-uniform
default, ``a = sqrt(5)``) and :math:`B = 0`, so an adapter starts as the identity edit;
:math:`s` is a runtime scale (0 switches the adapter off, as TTOM does after its first
denoising steps). A fused projection (the transformer's ``qkv`` or cross-attention ``kv``
kernel) can hold one adapter per column block (``splits``), as separate ``to_q`` /
``to_k`` / ``to_v`` adapters would: its update is ``[A_1 B_1 | A_2 B_2 | ...]``.

Everything is pure: :func:`init` returns the adapters as a dict ``path -> LoraWeights``
(a pytree optax can optimise), :func:`merge` returns the base parameters with
:math:`W + s \frac{\alpha}{r} A B` added at the targeted kernels (differentiable in the
adapters, so ``jax.grad`` of a loss of ``net(..., params=merge(...))`` trains them), and
:func:`apply_linear` is the unmerged form ``x W + b + s (alpha/r) (x A) B`` (the two agree:
tested). Targets are named by their ``/``-joined paths in a :class:`jaxlab.nn.Net`'s
params, e.g. ``"blocks/3/cross/q/kernel"`` for :class:`jaxlab.models.transformer.Transformer`;
:func:`attention_targets` lists a transformer layer's attention projections.

Example:
  >>> cfg = LoraConfig(rank=4, alpha=4.0, targets=attention_targets(1, "cross"))
  >>> lora = init(jax.random.key(0), net.params, cfg)      # B = 0: net unchanged
  >>> loss = lambda w: task_loss(net(x, params=merge(net.params, w, cfg)))
  >>> grads = jax.grad(loss)(lora)                          # only the adapters move

References:
  Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022,
  arXiv:2106.09685.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_int

__all__ = ["LoraConfig", "LoraWeights", "apply_linear", "attention_targets", "delta", "init",
           "merge", "param_paths"]


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """Which kernels get adapters and their size (static, hashable).

  ``targets`` pairs each kernel's path with its number of column blocks (1 for a plain
  projection; 3 for a fused ``qkv``, 2 for a fused ``kv``: one adapter per block).
  """

  rank: int  # r
  alpha: float  # the update is scaled by alpha / r
  targets: tuple[tuple[str, int], ...]  # (kernel path, column blocks)

  def __post_init__(self):
    check_int(self.rank, "rank", lo=1)
    if not isinstance(self.alpha, int | float) or isinstance(self.alpha, bool):
      raise TypeError(f"alpha must be a number, got {type(self.alpha).__name__}")
    if not self.targets or not all(
        isinstance(t, tuple) and len(t) == 2 and isinstance(t[0], str)
        and isinstance(t[1], int) and not isinstance(t[1], bool) and t[1] >= 1
        for t in self.targets):
      raise ValueError("targets must be a non-empty tuple of (kernel path, column blocks >= 1) "
                       f"pairs, got {self.targets!r}")
    paths = [t[0] for t in self.targets]
    if len(set(paths)) != len(paths):
      raise ValueError(f"targets name a kernel twice: {paths}")

  @property
  def scaling(self) -> float:
    return float(self.alpha) / self.rank


class LoraWeights(NamedTuple):
  """One kernel's adapters: ``a (blocks, d_in, r)``, ``b (blocks, r, d_out / blocks)``."""

  a: jax.Array
  b: jax.Array


def attention_targets(layer: int, kind: str = "cross", prefix: str = "") -> tuple:
  """The attention projections of :class:`jaxlab.models.transformer.Transformer` layer
  ``layer`` as :class:`LoraConfig` targets.

  ``kind="cross"``: the cross-attention ``q``, fused ``kv`` (one adapter each for k and
  v) and ``out`` kernels; ``"self"``: the fused ``qkv`` (one each for q, k, v) and
  ``out``. ``prefix`` is the transformer's path inside a larger module (``"tfm/"``).
  """
  check_int(layer, "layer", lo=0)
  base = f"{prefix}blocks/{layer}"
  if kind == "cross":
    return ((f"{base}/cross/q/kernel", 1), (f"{base}/cross/kv/kernel", 2),
            (f"{base}/cross/out/kernel", 1))
  if kind == "self":
    return (f"{base}/attn/qkv/kernel", 3), (f"{base}/attn/out/kernel", 1)
  raise ValueError(f"kind must be 'cross' or 'self', got {kind!r}")


def _key_name(k) -> str | None:
  for attr in ("key", "idx", "name"):
    if hasattr(k, attr):
      return str(getattr(k, attr))
  return None


def _path_str(path) -> str:
  # nnx.State leaves end in a `.value` attribute access: not part of the module path
  names = [_key_name(k) for k in path]
  names = [n for n in names if n is not None]
  if names and names[-1] == "value":
    names = names[:-1]
  return "/".join(names)


def param_paths(params: Any) -> dict[str, tuple[int, ...]]:
  """Every leaf of ``params`` as ``path -> shape`` (the names :class:`LoraConfig` uses)."""
  return {_path_str(p): tuple(jnp.shape(x)) for p, x in jax.tree_util.tree_leaves_with_path(params)}


def _shapes(params: Any, config: LoraConfig) -> dict[str, tuple[int, int]]:
  shapes = param_paths(params)
  out = {}
  for path, blocks in config.targets:
    if path not in shapes:
      near = [p for p in shapes if p.endswith("kernel")][:8]
      raise ValueError(f"target {path!r} is not a parameter path; kernels look like {near}")
    shape = shapes[path]
    if len(shape) != 2 or shape[1] % blocks:
      raise ValueError(f"target {path!r} must be a 2-D kernel whose {shape[-1]} output "
                       f"columns split into {blocks} blocks, got shape {shape}")
    out[path] = shape
  return out


def init(key: jax.Array, params: Any, config: LoraConfig) -> dict[str, LoraWeights]:
  """Fresh adapters for ``config.targets`` of ``params``: ``A ~ U(+-1/sqrt(d_in))``, ``B = 0``.

  Raises:
    ValueError: a target that is not a 2-D kernel of ``params`` (or whose columns do not
      split into its blocks).
  """
  if not isinstance(config, LoraConfig):
    raise TypeError(f"config must be a LoraConfig, got {type(config).__name__}")
  shapes = _shapes(params, config)
  out = {}
  for (path, blocks), k in zip(config.targets, jax.random.split(key, len(config.targets)),
                               strict=True):
    d_in, d_out = shapes[path]
    bound = 1.0 / jnp.sqrt(d_in)
    a = jax.random.uniform(k, (blocks, d_in, config.rank), jnp.float32, -bound, bound)
    out[path] = LoraWeights(a, jnp.zeros((blocks, config.rank, d_out // blocks), jnp.float32))
  return out


def delta(weights: LoraWeights, scaling: float, scale: jax.typing.ArrayLike = 1.0) -> jax.Array:
  """The kernel update ``scale * scaling * [A_1 B_1 | A_2 B_2 | ...]`` ``(d_in, d_out)``."""
  blocks = jnp.einsum("nir,nro->ino", weights.a, weights.b)  # (d_in, blocks, d_out / blocks)
  return scale * scaling * blocks.reshape(blocks.shape[0], -1)


def merge(params: Any, lora: dict[str, LoraWeights], config: LoraConfig,
          scale: jax.typing.ArrayLike = 1.0) -> Any:
  """``params`` with ``W + scale * (alpha / r) A B`` at every target (others unchanged).

  ``scale`` may be traced (a schedule that switches the adapters off mid-sampling).
  """
  missing = {p for p, _ in config.targets} - set(lora)
  if missing:
    raise ValueError(f"lora lacks adapters for targets {sorted(missing)}")

  def add(path, x):
    name = _path_str(path)
    if name not in lora:
      return x
    return x + delta(lora[name], config.scaling, scale).astype(x.dtype)

  return jax.tree_util.tree_map_with_path(add, params)


def apply_linear(x: jax.Array, kernel: jax.Array, bias: jax.Array | None,
                 weights: LoraWeights, scaling: float,
                 scale: jax.typing.ArrayLike = 1.0) -> jax.Array:
  """The unmerged adapted layer ``x W + b + scale * scaling * [(x A_j) B_j]_j``."""
  y = x @ kernel
  if bias is not None:
    y = y + bias
  low = jnp.einsum("...i,nir,nro->...no", x, weights.a, weights.b)
  return y + scale * scaling * low.reshape(*low.shape[:-2], -1)


def count(lora: dict[str, LoraWeights] | Sequence) -> int:
  """Number of adapter parameters."""
  return sum(int(x.size) for x in jax.tree.leaves(lora))
