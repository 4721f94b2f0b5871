"""Sequence-model agents (issue 21): planning and acting with small transformers trained by RL.

The papers fine-tune pretrained LLMs or image generators; each module here implements the
mechanism faithfully on a small toolkit transformer trained from scratch on a pure-JAX
environment from :mod:`jaxlab.envs`, and its docstring says what is the paper's and what
is our stand-in.
"""

__all__: list[str] = []
