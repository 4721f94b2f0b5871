"""Test beds and data sets, in one place (imports only :mod:`jaxlab.core`).

Modules:

* :mod:`~jaxlab.data.digits`: scikit-learn's 8 x 8 digits, loaded once, in named
  preprocessing variants (:func:`load_digits`: ``"pixels"``, ``"unit_images"``,
  ``"signed"``).
* :mod:`~jaxlab.data.markov_text`: documents from random sparse Markov chains
  (TREC's corpus), generated from a key.
* :mod:`~jaxlab.data.lm_tasks`: a tiny tokenizer and language-model tasks and corpora
  (sort, reverse, modular sum, latent parity with its reward, domain-mixed Markov text,
  HMM text, fact statements and questions).
* :mod:`~jaxlab.data.fact_qa`: synthetic fact QA with Zipf exposure counts, several valid
  answers per question and synonym surface forms (G-NLL's test bed).
* :mod:`~jaxlab.data.kv_recall`: long-context key-value recall rows (one-token
  dictionary entries in filler, then queried keys; FreeKV's test bed).
* :mod:`~jaxlab.data.mixtures`: isotropic Gaussian mixtures (ring centres,
  sampling, exact log-density).
* :mod:`~jaxlab.data.reward_tasks`: data sets with a known reward and drift
  proxies, and reward-labelled preference pairs with flipped labels (alpha-DPO).
* :mod:`~jaxlab.data.reason_pairs`: reason-annotated preference pairs under a
  spurious feature (ReCouPLe's synthetic test bed, :class:`PreferenceData`).
* :mod:`~jaxlab.data.digit_pairs`: digit-pair images with relational captions
  (Test-Time Matching's test bed).
* :mod:`~jaxlab.data.digit_layouts`: 1-2 digits in boxes on a canvas, captions naming the
  digits, layout types and prompt streams (TTOM's test bed).
* :mod:`~jaxlab.data.region_questions`: questions about the digit in a quadrant of a
  two-digit canvas, with its box mask and per-scene noise (CARE's test bed).
* :mod:`~jaxlab.data.moving_digits`: deterministic moving-digit videos and a lossless
  2 x 2 patch tokenizer (Lumos-1's test bed).
* :mod:`~jaxlab.data.tense_requests`: present / past / future-tense requests with harmful
  and benign objects and verbs, answers and the refusal (ASGuard's test bed).
* :mod:`~jaxlab.data.matching_instances`: incremental-matching instances
  (uniform, clustered, digits L1, road graph).
* :mod:`~jaxlab.data.span_tasks`: prompts answered by several independent spans, with
  gold plans (Planned Diffusion's format) and the plain answers.
* :mod:`~jaxlab.data.fact_texts`: rendered fact texts whose Horn rules imply facts no
  sentence states, with a sensitivity policy (RedacBench's test bed).
* :mod:`~jaxlab.data.kitchen`: a symbolic kitchen world (scenes, plans simulated state by
  state, 12 Horn hazard rules with danger levels, goal conditions; VIRF's test bed).
* :mod:`~jaxlab.data.entity_facts`: entity facts in two templates grouped in domains, with
  reasoning-trace and "I don't know" unlearning targets and an output classifier (TRU's
  test bed).
* :mod:`~jaxlab.data.subtasks`: multi-subtask prompts with gold subtask spans and the
  per-subtask grading (correct / mixed / wrong / omitted; ATA's test bed).
* :mod:`~jaxlab.data.rotated_digits`: four right-angle (or 15-degree) rotation domains of the
  digits with exact asymmetric label noise and leave-one-domain-out splits (DL4ND's test bed).
* :mod:`~jaxlab.data.two_camera_scenes`: ray-cast two-camera scenes with known geometry
  (a textured room, boxes, hands of 21 keypoints; exocentric and egocentric cameras), with
  depth up to an unknown scale plus noise and noisy keypoints (EgoWorld's test bed).
* :mod:`~jaxlab.data.digit_questions`: digit images as patch tokens with "which digit?" and
  "copy token k" questions and a hint token that mostly agrees with the label in training
  and conflicts at test (TVI's test bed).
* :mod:`~jaxlab.data.city_panoramas`: a procedural top-down city (road grid, buildings of
  two classes with heights, grass), its satellite view (labels and sun shadows) and exactly
  ray-cast street panoramas with labels, depths, poses and pixel correspondences
  (SatDreamer360's test bed).
* :mod:`~jaxlab.data.optim_problems`: optimizer test problems (Rosenbrock, least
  squares, digits / MNIST / CIFAR-10 classification through ``tfds.data_source``).
"""

import importlib

from jaxlab.data.digits import Digits, load_digits
from jaxlab.data.reason_pairs import PreferenceData

_MODULES = ("city_panoramas", "digit_layouts", "digit_pairs", "digit_questions", "digits",
            "entity_facts", "fact_qa", "fact_texts", "kitchen", "kv_recall", "lm_tasks",
            "markov_text", "matching_instances", "mixtures", "moving_digits", "optim_problems",
            "reason_pairs", "region_questions", "reward_tasks", "rotated_digits", "span_tasks",
            "subtasks", "tense_requests", "two_camera_scenes")


def __getattr__(name: str):
  # submodules load on first use (PEP 562): importing the transformer through
  # jaxlab.models need not import scipy for the matching instances
  if name in _MODULES:
    return importlib.import_module(f"jaxlab.data.{name}")
  raise AttributeError(f"module 'jaxlab.data' has no attribute {name!r}")


__all__ = ["Digits", "PreferenceData", "city_panoramas", "digit_layouts", "digit_pairs",
           "digit_questions", "digits", "entity_facts", "fact_qa", "fact_texts", "kitchen",
           "kv_recall", "lm_tasks", "load_digits", "markov_text", "matching_instances", "mixtures",
           "moving_digits", "optim_problems", "reason_pairs", "region_questions", "reward_tasks",
           "rotated_digits", "span_tasks", "subtasks", "tense_requests", "two_camera_scenes"]
