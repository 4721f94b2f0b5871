"""Language-model training methods built on the toolkit in :mod:`jaxlab.models`.

Modules: :mod:`~jaxlab.lm.adaback` (per-sample reveal curricula for GRPO),
:mod:`~jaxlab.lm.expert_divergence` (Expert Divergence Learning: domain-divergent MoE
routing).
"""

from jaxlab.lm import adaback, expert_divergence

__all__ = ["adaback", "expert_divergence"]
