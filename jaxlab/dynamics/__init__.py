"""Optimization dynamics: what gradient descent does at large steps."""

from jaxlab.dynamics import factorization
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
           "critical_step_size", "factorization", "run_gd", "sensitivity"]
