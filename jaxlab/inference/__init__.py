"""Inference and serving methods built on the toolkit in :mod:`jaxlab.models`.

Modules (issue 18): uncertainty from one greedy decode (G-NLL), speculative KV-page
retrieval with correction (FreeKV), an autoregressive plan followed by parallel
diffusion spans (Planned Diffusion), and cascade thresholds with a MILP resource
allocation (Cascadia). Each module names its paper and what is ours.

* :mod:`~jaxlab.inference.g_nll`: G-NLL (the greedy answer's negative log-likelihood as
  an uncertainty score) and the sampled baselines PE, LN-PE, SE, D-SE, with AUROC.
* :mod:`~jaxlab.inference.freekv`: FreeKV's page summaries, group-consistent page
  selection with sink and recent pages, speculative reuse of the previous query's pages
  with cosine-triggered correction, as a self-attention hook for
  :mod:`jaxlab.models.decoding`.
* :mod:`~jaxlab.inference.planned_diffusion`: the plan format's attention mask, the
  hybrid autoregressive / masked-diffusion loss, and the plan-then-parallel-spans decoder.
"""

from jaxlab.inference import cascadia, freekv, g_nll, planned_diffusion

__all__ = ["cascadia", "freekv", "g_nll", "planned_diffusion"]
