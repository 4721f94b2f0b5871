"""Flow-matching utilities, re-exported from their home :mod:`jaxlab.nn.flows`."""

from jaxlab.nn.flows import (
    DIVERGENCES,
    divergence_exact,
    divergence_hutchinson,
    euler_sample,
    flow_matching_loss,
    log_prob,
)

__all__ = ["DIVERGENCES", "divergence_exact", "divergence_hutchinson", "euler_sample",
           "flow_matching_loss", "log_prob"]
