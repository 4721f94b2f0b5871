"""Small models reusable across experiments.

Modules: :mod:`~jaxlab.models.transformer` (flax nnx decoder LM with RoPE, per-call
masks, hidden states and attention maps, head scaling, MoE and cross-attention, and its
loss), :mod:`~jaxlab.models.decoding` (KV-cache decoding, sampling, beam search,
log-probs, masked-diffusion unmasking), :mod:`~jaxlab.models.policy_gradient` (GRPO / PPO
over generated tokens: group advantages, returns-to-go, clipped loss with k3 KL),
:mod:`~jaxlab.models.ddpm` (a small DDPM: noise schedules, forward noising, an
MLP noise predictor, a scanned fit and an ancestral sampler),
:mod:`~jaxlab.models.sample_quality` (the shared sample-quality yardstick of generated
digits: a seeded digits classifier whose features give a Frechet distance and whose
predictions give class accuracy; our stand-in for Inception-FID). The data sets these
models train on live in :mod:`jaxlab.data`.
"""

from jaxlab.models import ddpm, decoding, policy_gradient, sample_quality, transformer
from jaxlab.models.transformer import Transformer, TransformerConfig, next_token_loss

__all__ = ["Transformer", "TransformerConfig", "ddpm", "decoding", "next_token_loss",
           "policy_gradient", "sample_quality", "transformer"]
