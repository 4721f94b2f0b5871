"""Language-model training methods built on the toolkit in :mod:`jaxlab.models`.

Modules: :mod:`~jaxlab.lm.adaback` (per-sample reveal curricula for GRPO),
:mod:`~jaxlab.lm.expert_divergence` (Expert Divergence Learning: domain-divergent MoE
routing), :mod:`~jaxlab.lm.cocomix` (CoCoMix: pretraining with continuous concepts),
:mod:`~jaxlab.lm.sstoken` (loss- and attention-scored token selection for SFT),
:mod:`~jaxlab.lm.sfdd` (flattest-sample selection for speculative draft training).
"""

from jaxlab.lm import adaback, cocomix, expert_divergence, sfdd, sstoken

__all__ = ["adaback", "cocomix", "expert_divergence", "sfdd", "sstoken"]
