"""Leaf utilities that every other jaxlab package (and ``kernels_pallas``) may import.

Nothing here imports another jaxlab package. Modules: :mod:`~jaxlab.core.rng`
(PRNG keys in typed and raw form, counter-hash random bits),
:mod:`~jaxlab.core.checks` (argument checks on concrete values),
:mod:`~jaxlab.core.stats` (the spread-over-seeds convention; the paired t and bootstrap
intervals the experiments' verdict protocol decides on),
:mod:`~jaxlab.core.horn` (Horn-clause forward chaining with proofs),
:mod:`~jaxlab.core.fusion` (hints to XLA's fusion that leave the hinted values unchanged, up to
flushed subnormals).
"""

from jaxlab.core import checks, fusion, horn, rng, stats
from jaxlab.core.checks import check_int, check_range, concrete, is_traced
from jaxlab.core.fusion import materialize
from jaxlab.core.rng import (
    advance_key,
    as_key,
    as_key_data,
    hash_bits,
    key_words,
    random_bits,
    split_key_data,
    split_leaf_keys,
    stream_bits,
    stream_key_data,
)
from jaxlab.core.stats import (
    Interval,
    Spread,
    bootstrap_interval,
    format_spread,
    spread,
    t_interval,
    units_needed,
)

__all__ = ["Interval", "Spread", "advance_key", "as_key", "as_key_data", "bootstrap_interval",
           "check_int", "check_range", "checks", "concrete", "format_spread", "fusion",
           "hash_bits", "horn", "is_traced", "key_words", "materialize", "random_bits", "rng",
           "split_key_data", "split_leaf_keys", "spread", "stats", "stream_bits",
           "stream_key_data", "t_interval", "units_needed"]
