"""Reinforcement learning: flow policies, agents, and the offline and hierarchical trainers.

Modules: :mod:`~jaxlab.rl.flows` (re-exports :mod:`jaxlab.nn.flows`),
:mod:`~jaxlab.rl.networks` (velocity field, one-step actor, critic ensemble),
:mod:`~jaxlab.rl.agents` (FAC, FQL, goal-conditioned SAC, DIPPER),
:mod:`~jaxlab.rl.train` (offline pipeline),
:mod:`~jaxlab.rl.hrl` (FLAT / HIER / DIPPER loop), :mod:`~jaxlab.rl.ogbench_data`
(OGBench datasets; needs the ``ogbench`` extra, imported lazily).
"""

from jaxlab.rl import agents, flows, hrl, networks, train
from jaxlab.rl.flows import euler_sample, flow_matching_loss, log_prob

__all__ = ["agents", "euler_sample", "flow_matching_loss", "flows", "hrl", "log_prob",
           "networks", "train"]
