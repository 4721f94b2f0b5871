"""Reinforcement learning: flow policies, agents, and the offline and hierarchical trainers.

Modules: :mod:`~jaxlab.rl.networks` (velocity field, one-step actor, critic ensemble),
:mod:`~jaxlab.rl.agents` (FAC, FQL, goal-conditioned SAC, DIPPER),
:mod:`~jaxlab.rl.train` (offline pipeline),
:mod:`~jaxlab.rl.hrl` (FLAT / HIER / DIPPER loop), :mod:`~jaxlab.rl.ogbench_data`
(OGBench datasets; needs the ``ogbench`` extra, imported lazily). The flow-matching
utilities live in :mod:`jaxlab.nn.flows`.
"""

from jaxlab.rl import agents, hrl, networks, train

__all__ = ["agents", "hrl", "networks", "train"]
