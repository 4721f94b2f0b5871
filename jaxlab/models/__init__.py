"""Small models reusable across experiments.

Modules: :mod:`~jaxlab.models.transformer` (flax nnx decoder LM and its loss),
:mod:`~jaxlab.models.ddpm` (a small DDPM: noise schedules, forward noising, an
MLP noise predictor, a scanned fit and an ancestral sampler), and
:mod:`~jaxlab.models.markov_text`, which re-exports :mod:`jaxlab.data.markov_text`
(the corpus' home since the data sets moved to :mod:`jaxlab.data`).
"""

from jaxlab.models import ddpm, markov_text, transformer
from jaxlab.models.transformer import Transformer, TransformerConfig, next_token_loss

__all__ = ["Transformer", "TransformerConfig", "ddpm", "markov_text", "next_token_loss",
           "transformer"]
