"""Preference learning: alpha-DPO for diffusion, ReCouPLe reward models, Test-Time Matching.

Modules:

* :mod:`~jaxlab.preference.alpha_dpo`: Diffusion-DPO and alpha-DPO losses on
  per-sample denoising errors, the dynamic alpha schedule and a scanned
  fine-tuning loop (on :mod:`jaxlab.models.ddpm`).
* :mod:`~jaxlab.preference.recouple`: the reason-projection reward model
  (ReCouPLe) and a Bradley-Terry baseline.
* :mod:`~jaxlab.preference.ttm`: group score, GroupMatch, their chance levels
  and the Test-Time Matching self-training loop.
* :mod:`~jaxlab.preference.digit_pairs`: a small CLIP-style dual encoder for TTM
  on the digit-pair image/caption test bed (:mod:`jaxlab.data.digit_pairs`).
"""

from jaxlab.preference import alpha_dpo, digit_pairs, recouple, ttm
from jaxlab.preference.alpha_dpo import alpha_dpo_loss, diffusion_dpo_loss
from jaxlab.preference.recouple import bt_loss, project_onto_reason, recouple_loss
from jaxlab.preference.ttm import group_match, group_score, test_time_matching

__all__ = ["alpha_dpo", "alpha_dpo_loss", "bt_loss", "diffusion_dpo_loss", "digit_pairs",
           "group_match", "group_score", "project_onto_reason", "recouple", "recouple_loss",
           "test_time_matching", "ttm"]
