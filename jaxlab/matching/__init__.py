"""Incremental metric bipartite matching, jit-compiled.

Requests arrive one at a time (or in batches) and are matched to a fixed set
of servers; after every arrival the state holds a matching of all requests so
far. Algorithms: "exact" (shortest augmenting path, optimal after every
insertion), "greedy" and the paper's "push_relabel" approximation.
"""

from jaxlab.matching.api import (
    assignment,
    check_invariants,
    cost,
    init,
    insert,
    insert_batch,
    insert_many,
    num_inserted,
)
from jaxlab.matching.reference import (
    cost_matrix,
    incremental_exact_numpy,
    optimal_assignment,
    optimal_cost,
)
from jaxlab.matching.state import MatchConfig, MatchState

__all__ = [
    "MatchConfig",
    "MatchState",
    "assignment",
    "check_invariants",
    "cost",
    "cost_matrix",
    "incremental_exact_numpy",
    "init",
    "insert",
    "insert_batch",
    "insert_many",
    "num_inserted",
    "optimal_assignment",
    "optimal_cost",
]
