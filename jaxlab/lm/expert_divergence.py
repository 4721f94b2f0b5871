r"""Expert Divergence Learning: push MoE routing apart between data domains.

A mixture-of-experts LM trained with a load-balancing loss alone spreads tokens over
the experts but has no reason to send different domains to different experts. Expert
Divergence Learning (EDL) adds a loss that rewards routing divergence between domains.
With ``p(x_t)`` a layer's router probabilities (the softmax before top-k) at token
``t``, the batch's domain-level router distributions are

.. math::
  \bar p_s = \frac{1}{T}\sum_t p(x_t), \qquad
  \bar p_j = \frac{1}{|B_j|}\sum_{s \in B_j} \bar p_s

(sequence mean, then the mean over the batch's sequences of domain ``j``), and over
the ``M_B`` domains present in the batch

.. math::
  L_{ED} = \frac{1}{\binom{M_B}{2}} \sum_{j<k} -\log\big(\mathrm{JSD}(\bar p_j \| \bar p_k)
      + \epsilon\big), \qquad
  \mathrm{JSD}(P\|Q) = \tfrac12 \mathrm{KL}(P\|M) + \tfrac12 \mathrm{KL}(Q\|M),\ M = \tfrac{P+Q}{2},

in nats (so ``0 <= JSD <= log 2``), computed per MoE layer and averaged over layers.
The training loss is ``L = L_LM + alpha L_LB + beta L_ED`` with ``L_LB`` the Switch
load-balancing loss. Minimising ``-log(JSD + eps)`` maximises the pairwise JSD; the
log boosts the gradient where the JSD is small.

Diagnostics (:func:`routing_metrics`): the mean inter-domain JSD, the domain-expert
mutual information ``I(D; E)`` (from the top-k assignments, and from the soft router
probabilities), and the entropy of the experts' load.

Which probabilities (the pre-top-k softmax), the per-layer average, ``eps = 1e-6``,
``alpha = 0.01`` and a sequence mean that skips masked tokens are our choices: the
sources read do not give them.

Example:
  >>> out = net.module().forward(tokens[:, :-1])             # router_probs (L, B, T, E)
  >>> loss = expert_divergence_loss(out.router_probs, domains, num_domains=4)
  >>> total, info = edl_loss(net, tokens, domains, num_domains=4, beta=0.05)
  >>> grads = jax.grad(lambda p: edl_loss(net.replace(params=p), tokens, domains,
  ...                                     num_domains=4, beta=0.05)[0])(net.params)

References:
  "Expert Divergence Learning for MoE-based Language Models", arXiv:2603.00054, 2026
  (ICLR 2026; no code released).
  Fedus, Zoph, Shazeer, "Switch Transformers", arXiv:2101.03961, 2021 (load balancing).
  Lin, "Divergence measures based on the Shannon entropy", IEEE Trans. Inf. Theory, 1991.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.checks import check_int, check_range, concrete
from jaxlab.nn import Net

__all__ = ["domain_expert_joint", "domain_router_distributions", "domain_sampler", "edl_loss",
           "expert_divergence_loss", "jensen_shannon", "load_entropy", "mutual_information",
           "pairwise_jsd", "per_domain_mean", "routing_metrics"]

EPS = 1e-6  # epsilon inside -log(JSD + eps) [our choice: not given in the sources read]


def _kl_terms(p: jax.Array, m: jax.Array) -> jax.Array:
  """``sum p log(p / m)`` over the last axis with ``0 log 0 = 0`` (gradient-safe at 0)."""
  pos = p > 0
  safe_p, safe_m = jnp.where(pos, p, 1.0), jnp.where(pos, m, 1.0)
  return jnp.sum(jnp.where(pos, p * (jnp.log(safe_p) - jnp.log(safe_m)), 0.0), -1)


def jensen_shannon(p: jax.Array, q: jax.Array) -> jax.Array:
  r"""Jensen-Shannon divergence ``1/2 KL(P||M) + 1/2 KL(Q||M)``, ``M = (P+Q)/2``, in nats.

  Args:
    p, q: distributions over the last axis (broadcast against each other).

  Returns:
    The divergence over the leading axes, in ``[0, log 2]``; equals
    ``scipy.spatial.distance.jensenshannon(p, q) ** 2`` (natural log).
  """
  m = 0.5 * (p + q)
  return 0.5 * _kl_terms(p, m) + 0.5 * _kl_terms(q, m)


def _check_labels(domains: jax.Array, num_domains: int) -> jax.Array:
  """Raises for concrete labels outside ``[0, num_domains)``; returns the number of such rows
  (nonzero only for traced labels, which cannot raise: the loss's info reports it)."""
  labels = concrete(domains, "domains")
  if labels is not None and labels.size and (labels.min() < 0 or labels.max() >= num_domains):
    bad = labels[(labels < 0) | (labels >= num_domains)].reshape(-1)[0].item()
    raise ValueError(f"domains must be ints in [0, num_domains={num_domains}), got {bad!r}")
  return jnp.sum((domains < 0) | (domains >= num_domains))


def per_domain_mean(values: jax.Array, domains: jax.Array, num_domains: int,
                    weights: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Mean of per-row ``values (B, ...)`` within each domain.

  Args:
    values: ``(B, ...)`` one entry per sequence.
    domains: int ``(B,)`` domain label of each row, in ``[0, num_domains)`` (a label
      outside it matches no domain: its row is left out, as ``jax.nn.one_hot`` does).
    num_domains: the number of domains ``D`` (static).
    weights: optional ``(B,)`` row weights (0 drops a row).

  Returns:
    ``(means (D, ...), counts (D,))``; a domain without rows has mean 0 and count 0.
  """
  onehot = jax.nn.one_hot(domains, num_domains, dtype=values.dtype)  # (B, D)
  if weights is not None:
    onehot = onehot * weights[:, None]
  counts = onehot.sum(0)
  sums = jnp.einsum("bd,b...->d...", onehot, values)
  shape = (num_domains,) + (1,) * (values.ndim - 1)
  return sums / jnp.maximum(counts, 1e-12).reshape(shape), counts


def domain_router_distributions(router_probs: jax.Array, domains: jax.Array, num_domains: int,
                                mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  r"""Domain-level router distributions ``\bar p_j`` of every layer.

  Args:
    router_probs: ``(L, B, T, E)`` router probabilities (``DecoderOutput.router_probs``).
    domains: int ``(B,)`` domain of each sequence.
    num_domains: number of domains ``D`` (static).
    mask: optional ``(B, T)`` token weights (e.g. 0 on padding) for the sequence means.

  Returns:
    ``(dist (L, D, E), present (D,) bool)``: per layer the mean over the domain's
    sequences of each sequence's mean router probability; ``present`` marks the domains
    with at least one sequence in the batch (an absent domain's row is zeros).
  """
  if mask is None:
    seq = router_probs.mean(2)  # (L, B, E): p_bar_s
  else:
    w = mask.astype(router_probs.dtype)
    seq = jnp.einsum("lbte,bt->lbe", router_probs, w) / jnp.maximum(w.sum(1), 1e-12)[:, None]
  dist, counts = per_domain_mean(jnp.moveaxis(seq, 1, 0), domains, num_domains)  # (D, L, E)
  return jnp.moveaxis(dist, 1, 0), counts > 0


def pairwise_jsd(dist: jax.Array) -> jax.Array:
  """``(..., D, D)`` Jensen-Shannon divergences between the rows of ``dist (..., D, E)``."""
  return jensen_shannon(dist[..., :, None, :], dist[..., None, :, :])


def _pair_mask(present: jax.Array) -> jax.Array:
  d = present.shape[0]
  upper = jnp.arange(d)[:, None] < jnp.arange(d)[None, :]
  return upper & present[:, None] & present[None, :]


def expert_divergence_loss(router_probs: jax.Array, domains: jax.Array, num_domains: int, *,
                           eps: float = EPS, mask: jax.Array | None = None
                           ) -> tuple[jax.Array, dict[str, jax.Array]]:
  r"""``L_ED``: mean over present domain pairs of ``-log(JSD + eps)``, averaged over layers.

  Args:
    router_probs: ``(L, B, T, E)`` router probabilities of the ``L`` MoE layers.
    domains: int ``(B,)`` domain label of each sequence (true or, for a control, random).
    num_domains: number of domain labels ``D`` (static).
    eps: the ``epsilon`` inside the log (may be traced).
    mask: optional ``(B, T)`` token weights for the sequence means.

  Returns:
    ``(loss, info)``: the scalar loss (0 when fewer than two domains are present) and
    ``{"ed/jsd": mean pairwise JSD over layers and pairs, "ed/pairs": number of pairs,
    "ed/unlabelled": rows whose label is outside [0, num_domains), left out}``.

  Raises:
    ValueError: for a bad shape, ``eps <= 0``, or concrete labels out of range (traced
      labels cannot raise: ``ed/unlabelled`` counts them).
  """
  if router_probs.ndim != 4:
    raise ValueError(f"router_probs must be (layers, batch, T, experts), got shape "
                     f"{router_probs.shape}")
  check_int(num_domains, "num_domains", lo=1)
  check_range(eps, "eps", lo=0.0, lo_open=True)
  unlabelled = _check_labels(domains, num_domains)
  dist, present = domain_router_distributions(router_probs, domains, num_domains, mask)
  jsd = pairwise_jsd(dist)  # (L, D, D)
  pairs = _pair_mask(present).astype(jsd.dtype)
  num_pairs = pairs.sum()  # C(M_B, 2)
  denom = jnp.maximum(num_pairs, 1.0)
  per_layer = jnp.sum(pairs * -jnp.log(jsd + eps), (-2, -1)) / denom  # (L,)
  loss = jnp.where(num_pairs > 0, per_layer.mean(), 0.0)
  mean_jsd = jnp.sum(pairs * jsd, (-2, -1)).mean() / denom
  return loss, {"ed/jsd": mean_jsd, "ed/pairs": num_pairs, "ed/unlabelled": unlabelled}


def edl_loss(net: Net, tokens: jax.Array, domains: jax.Array, *, num_domains: int,
             beta: float | jax.Array, aux_coef: float | jax.Array = 0.01,
             eps: float = EPS) -> tuple[jax.Array, dict[str, jax.Array]]:
  r"""The training loss ``L_LM + alpha L_LB + beta L_ED`` on one batch.

  Args:
    net: a :class:`jaxlab.nn.Net` holding an MoE :class:`jaxlab.models.transformer.
      Transformer` (``num_experts > 0``).
    tokens: int ``(B, T + 1)``; positions ``0..T-1`` are inputs, ``1..T`` targets.
    domains: int ``(B,)`` the labels ``L_ED`` groups by.
    num_domains: number of labels (static).
    beta: the weight of ``L_ED`` (0: the load-balanced baseline; may be traced).
    aux_coef: ``alpha``, the weight of the Switch loss (summed over MoE layers).
    eps: the ``epsilon`` of ``L_ED``.

  Returns:
    ``(loss, info)`` with ``lm/ce``, ``aux/load_balance``, ``ed/loss``, ``ed/jsd``.
  """
  out = net.module().forward(tokens[:, :-1])
  if out.router_probs is None:
    raise ValueError("edl_loss needs an MoE transformer: TransformerConfig(num_experts > 0)")
  ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, tokens[:, 1:]).mean()
  ed, info = expert_divergence_loss(out.router_probs, domains, num_domains, eps=eps)
  loss = ce + aux_coef * out.aux_loss + beta * ed
  return loss, {"lm/ce": ce, "aux/load_balance": out.aux_loss, "ed/loss": ed, **info}


# ---------------------------------------------------------------- diagnostics
def mutual_information(joint: jax.Array) -> jax.Array:
  r"""``I(X; Y) = sum p(x, y) log(p(x, y) / (p(x) p(y)))`` in nats of a joint ``(..., X, Y)``
  (normalised here, so counts work too)."""
  joint = joint / joint.sum((-2, -1), keepdims=True)
  px, py = joint.sum(-1, keepdims=True), joint.sum(-2, keepdims=True)
  pos = joint > 0
  ratio = jnp.where(pos, joint, 1.0) / jnp.where(pos, px * py, 1.0)
  return jnp.sum(jnp.where(pos, joint * jnp.log(ratio), 0.0), (-2, -1))


def domain_expert_joint(router_probs: jax.Array, domains: jax.Array, num_domains: int,
                        k: int | None = None) -> jax.Array:
  """``(L, D, E)`` joint of (domain, expert) over the batch's tokens, per layer.

  ``k=None``: a token spreads its router probabilities over the experts (soft);
  ``k``: it counts ``1/k`` for each of its top-``k`` experts (the routing actually used).
  """
  e = router_probs.shape[-1]
  if k is None:
    weight = router_probs
  else:
    top = jax.lax.top_k(router_probs, k)[1]
    weight = jax.nn.one_hot(top, e, dtype=router_probs.dtype).sum(-2) / k
  onehot = jax.nn.one_hot(domains, num_domains, dtype=router_probs.dtype)
  joint = jnp.einsum("lbte,bd->lde", weight, onehot)
  return joint / joint.sum((-2, -1), keepdims=True)


def load_entropy(router_probs: jax.Array, k: int) -> jax.Array:
  """``(L,)`` entropy (nats) of each layer's expert load: the share of the top-``k``
  assignments each expert gets (``log E`` when perfectly balanced)."""
  e = router_probs.shape[-1]
  top = jax.lax.top_k(router_probs, k)[1]
  load = jax.nn.one_hot(top, e, dtype=router_probs.dtype).sum(-2).reshape(
      router_probs.shape[0], -1, e).mean(1) / k
  return -jnp.sum(jnp.where(load > 0, load * jnp.log(jnp.where(load > 0, load, 1.0)), 0.0), -1)


def routing_metrics(router_probs: jax.Array, domains: jax.Array, num_domains: int,
                    k: int) -> dict[str, jax.Array]:
  """Specialisation diagnostics of one batch, each averaged over layers.

  Returns:
    ``jsd``: mean pairwise JSD of the domain-level router distributions (present
    domains); ``mi``: domain-expert mutual information of the top-``k`` assignments;
    ``mi_soft``: the same from the router probabilities; ``load_entropy``: entropy
    of the experts' load (top-``k`` shares); the per-layer values under ``*_layers``.
  """
  dist, present = domain_router_distributions(router_probs, domains, num_domains)
  pairs = _pair_mask(present).astype(dist.dtype)
  jsd = jnp.sum(pairs * pairwise_jsd(dist), (-2, -1)) / jnp.maximum(pairs.sum(), 1.0)
  mi = mutual_information(domain_expert_joint(router_probs, domains, num_domains, k))
  mi_soft = mutual_information(domain_expert_joint(router_probs, domains, num_domains))
  ent = load_entropy(router_probs, k)
  return {"jsd": jsd.mean(), "mi": mi.mean(), "mi_soft": mi_soft.mean(),
          "load_entropy": ent.mean(), "jsd_layers": jsd, "mi_layers": mi,
          "load_entropy_layers": ent}


def domain_sampler(tokens: jax.Array, labels: jax.Array, per_domain: int
                   ) -> Callable[[jax.Array, jax.Array], Any]:
  """A stratified sampler for :func:`jaxlab.training.fit`: every batch holds every domain.

  Args:
    tokens: ``(D, N, T)`` each domain's rows.
    labels: ``(D, N)`` the label ``L_ED`` sees for each row (the domain itself, or a
      random label for the control).
    per_domain: rows drawn (with replacement) from each domain per batch.

  Returns:
    ``sample(key, step) -> (tokens (D * per_domain, T), labels (D * per_domain,))``.
  """
  check_int(per_domain, "per_domain", lo=1)
  d, n = tokens.shape[:2]

  def sample(key: jax.Array, step: jax.Array):
    del step
    idx = jax.random.randint(key, (d, per_domain), 0, n)
    rows = jnp.arange(d)[:, None]
    return (tokens[rows, idx].reshape(d * per_domain, -1), labels[rows, idx].reshape(-1))

  return sample
