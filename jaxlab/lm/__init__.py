"""Language-model training methods built on the toolkit in :mod:`jaxlab.models`.

Modules: :mod:`~jaxlab.lm.adaback` (per-sample reveal curricula for GRPO).
"""

from jaxlab.lm import adaback

__all__ = ["adaback"]
