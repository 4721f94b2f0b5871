"""Generative-model methods (issue 19) built on the flow utilities of :mod:`jaxlab.nn.flows`.

Each module names its paper and what is ours; samples are scored with the shared
yardstick :mod:`jaxlab.models.sample_quality`.

* :mod:`~jaxlab.generative.fastflow`: FastFlow's bandit-chosen step skipping in Euler
  sampling (finite-difference velocity extrapolation, one UCB1 bandit per step index,
  forced full evaluations), as a hook of :func:`jaxlab.nn.flows.euler_sample`, and the
  fixed velocity-caching baseline.
* :mod:`~jaxlab.generative.distill_kac`: DistillKac's damped-wave (Kac) flows: exact Kac
  simulation, the marginal density and Bessel-ratio velocity, Euler / AB-2 sampling (a
  hook of the shared sampler), velocity-space CFG and endpoint-only staged distillation.
* :mod:`~jaxlab.generative.nets`: the time-conditioned MLP velocity field both experiments
  train.
* :mod:`~jaxlab.generative.ttom`: TTOM's test-time optimisation of LoRA adapters toward a
  layout (JSD between cross-attention maps and Gaussian box targets) as a hook of the DDPM
  sampler, its memory of adapters (LFU eviction), latent guidance, and a tiny DiT.
* :mod:`~jaxlab.generative.lumos`: Lumos-1's autoregressive video generation on the
  toolkit transformer: MM-RoPE (interleaved t / h / w rotary pairs, positions scaled by the
  tokenizer's strides), AR-DF attention, tube masking and per-frame MaskGIT decoding with a
  partially masked history.
"""

from jaxlab.generative import distill_kac, fastflow, lumos, nets, ttom

__all__ = ["distill_kac", "fastflow", "lumos", "nets", "ttom"]
