"""Sequence-model agents (issue 21): planning and acting with small transformers trained by RL.

The papers fine-tune pretrained LLMs or image generators; each module here implements the
mechanism faithfully on a small toolkit transformer trained from scratch on a pure-JAX
environment from :mod:`jaxlab.envs`, and its docstring says what is the paper's and what
is our stand-in.

* :mod:`~jaxlab.agents.greedy`: "LLMs are Greedy Agents": bandit metrics (coverage, frequency
  bias, the knowing-doing gap, regret), UCB / random baselines, a rationale-then-action
  sequence policy given greedy and frequency biases by behaviour cloning, and RL fine-tuning
  with the toolkit's clipped policy gradient.
"""

from jaxlab.agents import greedy

__all__ = ["greedy"]
