"""Optimization dynamics: what gradient descent does at large steps
(:mod:`~jaxlab.dynamics.factorization`) and what AdamW's final weights remember
of each batch (:mod:`~jaxlab.dynamics.trec`)."""

from jaxlab.dynamics import factorization, trec
from jaxlab.dynamics.factorization import (
    boundary_mask,
    box_counting_dimension,
    convergence_map,
    critical_step_bisection,
    critical_step_size,
    run_gd,
    sensitivity,
)

__all__ = ["box_counting_dimension", "boundary_mask", "convergence_map", "critical_step_bisection",
           "critical_step_size", "factorization", "run_gd", "sensitivity", "trec"]
