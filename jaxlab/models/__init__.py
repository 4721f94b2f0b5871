"""Small models reusable across experiments: a tiny causal transformer LM and synthetic text.

Modules: :mod:`~jaxlab.models.transformer` (flax nnx decoder LM and its loss),
:mod:`~jaxlab.models.markov_text` (documents from random sparse Markov chains,
generated offline from a key).
"""

from jaxlab.models import markov_text, transformer
from jaxlab.models.transformer import Transformer, TransformerConfig, next_token_loss

__all__ = ["Transformer", "TransformerConfig", "markov_text", "next_token_loss", "transformer"]
