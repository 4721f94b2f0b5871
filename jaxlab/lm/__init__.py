"""Language-model training methods built on the toolkit in :mod:`jaxlab.models`.

Modules: :mod:`~jaxlab.lm.adaback` (per-sample reveal curricula for GRPO),
:mod:`~jaxlab.lm.sstoken` (loss- and attention-scored token selection for SFT).
"""

from jaxlab.lm import adaback, sstoken

__all__ = ["adaback", "sstoken"]
