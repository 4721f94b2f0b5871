"""Shared network pieces: :class:`Net` (how jaxlab holds any nnx network), :class:`MLP`,
flow-matching utilities (:mod:`~jaxlab.nn.flows`: loss, Euler sampling, log-densities) and
LoRA adapters (:mod:`~jaxlab.nn.lora`: pure-functional low-rank updates of linear kernels).

Imports only :mod:`jaxlab.core` (and jax, flax): importing a model never pulls in
agents, trainers or orbax.
"""

from jaxlab.nn import flows, lora, networks
from jaxlab.nn.flows import euler_sample, flow_matching_loss, log_prob
from jaxlab.nn.networks import MLP, Net

__all__ = ["MLP", "Net", "euler_sample", "flow_matching_loss", "flows", "log_prob", "lora",
           "networks"]
