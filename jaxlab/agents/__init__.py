"""Sequence-model agents (issue 21): planning and acting with small transformers trained by RL.

The papers fine-tune pretrained LLMs or image generators; each module here implements the
mechanism faithfully on a small toolkit transformer trained from scratch on a pure-JAX
environment from :mod:`jaxlab.envs`, and its docstring says what is the paper's and what
is our stand-in.

* :mod:`~jaxlab.agents.greedy`: "LLMs are Greedy Agents": bandit metrics (coverage, frequency
  bias, the knowing-doing gap, regret), UCB / random baselines, a rationale-then-action
  sequence policy given greedy and frequency biases by behaviour cloning, and RL fine-tuning
  with the toolkit's clipped policy gradient.
* :mod:`~jaxlab.agents.vprl`: VPRL (Visual Planning, arXiv:2505.11409): plans as sequences
  of generated images on :class:`jaxlab.envs.GridWorld`, the action parsed from each image
  pair, stage 1 SFT on random trajectories then GRPO on the progress reward; the VPFT
  baseline and multi-step plans on held-out maps.
"""

from jaxlab.agents import greedy, vprl

__all__ = ["greedy", "vprl"]
