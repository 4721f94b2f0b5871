"""Generative-model methods (issue 19) built on the flow utilities of :mod:`jaxlab.nn.flows`.

Each module names its paper and what is ours; samples are scored with the shared
yardstick :mod:`jaxlab.models.sample_quality`.

* :mod:`~jaxlab.generative.fastflow`: FastFlow's bandit-chosen step skipping in Euler
  sampling (finite-difference velocity extrapolation, one UCB1 bandit per step index,
  forced full evaluations), as a hook of :func:`jaxlab.nn.flows.euler_sample`, and the
  fixed velocity-caching baseline.
"""

from jaxlab.generative import fastflow

__all__ = ["fastflow"]
