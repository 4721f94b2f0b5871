"""Language-model training methods built on the toolkit in :mod:`jaxlab.models`.

Modules: :mod:`~jaxlab.lm.adaback` (per-sample reveal curricula for GRPO),
:mod:`~jaxlab.lm.sfdd` (flattest-sample selection for speculative draft training).
"""

from jaxlab.lm import adaback, sfdd

__all__ = ["adaback", "sfdd"]
