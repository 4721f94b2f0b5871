"""Unregularized flow actor-critic: FAC with the critic penalty switched off.

The ablation arm of the FAC paper: the same frozen behavior flow, one-step
actor and critic ensemble as :mod:`jaxlab.rl.agents.fac`, but nothing keeps
the critic from over-valuing actions the data never took. With ``distill=0``
the actor is not tied to the behavior either (pure Q maximization).
"""

from __future__ import annotations

from jaxlab.rl.agents.fac import FACAgent, FACConfig

UnregularizedAgent = FACAgent


def get_config(distill: float = 1.0, **overrides) -> FACConfig:
  """FAC's configuration with ``alpha = 0`` (no critic penalty).

  Without distillation nothing uses the behavior flow, so it is not trained.
  """
  pretrain = {} if distill > 0 else {"pretrain_steps": 0}
  return FACConfig(**{"alpha": 0.0, "distill": distill, **pretrain, **overrides})
