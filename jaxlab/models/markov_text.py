"""Moved to :mod:`jaxlab.data.markov_text`; this module re-exports it (the old import path)."""

from jaxlab.data.markov_text import (
    Chains,
    MarkovTextSpec,
    document_chain,
    hq_sequences,
    make_chains,
    mixture,
    sample_sequences,
    sparse_chain,
    step_batches,
    with_hq_slice,
)

__all__ = ["Chains", "MarkovTextSpec", "document_chain", "hq_sequences", "make_chains", "mixture",
           "sample_sequences", "sparse_chain", "step_batches", "with_hq_slice"]
