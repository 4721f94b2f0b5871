"""Safety, unlearning, verification and redaction methods (issue 20) on small language models.

The papers work on pretrained LLMs; each module here implements the mechanism
faithfully and shows it on a small model trained from scratch on synthetic data
built so that the failure the paper fixes occurs; each module's docstring says
what is the paper's and what is our stand-in.

* :mod:`~jaxlab.safety.asguard`: ASGuard: head attribution (integrated gradients on the
  refusal log-probability, activation patching), the vulnerable-head set, per-head scaling
  vectors (pre-``W_O`` and post-projection) and preventive fine-tuning.
* :mod:`~jaxlab.safety.ata`: ATA, attending to the active subtask: mutual and dynamic
  masks on selected heads, the active-subtask score with its entropy gate and the chain /
  branch / parallel rules, greedy decoding through the toolkit's KV cache.
* :mod:`~jaxlab.safety.redacbench`: proposition-based Security and Utility of a redaction
  (implied propositions by forward chaining, the exact inference judge, micro and per-text
  pooling), keyword masking, one step of adversarial redaction and a learned rewriter.
* :mod:`~jaxlab.safety.virf`: VIRF, a symbolic tutor that verifies plans state by state
  against Horn hazard rules, explains each hazard (rule, causal chain, suggestion), and
  the plan -> verify -> feedback -> replan loop with its metrics (HAR, GCR).
* :mod:`~jaxlab.safety.tru`: TRU, unlearning by reasoning targets (the target loss over a
  reasoning trace and a response, plus gradient difference), and the reusable unlearning
  losses (gradient ascent, gradient difference, NPO, "I don't know" SFT) and metrics.
"""

from jaxlab.safety import asguard, ata, redacbench, tru, virf

__all__ = ["asguard", "ata", "redacbench", "tru", "virf"]
