"""Inference and serving methods built on the toolkit in :mod:`jaxlab.models`.

Modules (issue 18): uncertainty from one greedy decode (G-NLL), speculative KV-page
retrieval with correction (FreeKV), an autoregressive plan followed by parallel
diffusion spans (Planned Diffusion), and cascade thresholds with a MILP resource
allocation (Cascadia). Each module names its paper and what is ours.

* :mod:`~jaxlab.inference.planned_diffusion`: the plan format's attention mask, the
  hybrid autoregressive / masked-diffusion loss, and the plan-then-parallel-spans decoder.
"""

from jaxlab.inference import planned_diffusion

__all__ = ["planned_diffusion"]
