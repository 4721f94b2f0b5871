"""Preference learning: alpha-DPO for diffusion, ReCouPLe reward models, Test-Time Matching."""
