"""Moved to :mod:`jaxlab.data.matching_instances`; this module re-exports it (the old path)."""

from jaxlab.data.matching_instances import (
    FAMILIES,
    clustered,
    digits_l1,
    make,
    road_graph,
    uniform,
)

__all__ = ["FAMILIES", "clustered", "digits_l1", "make", "road_graph", "uniform"]
