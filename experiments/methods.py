"""The registry of jaxlab's methods: one entry per method, read by everything that lists them.

``run_all`` runs the entries' experiments and benchmarks in this order, ``experiments.docs``
generates the README's methods and results tables from them and asks each entry's module
for its page's generated regions, and ``tests/experiments/test_contract.py`` checks every
entry's ``claims()`` against the verdict protocol (:mod:`experiments.protocol`).

``ported`` says whether a method's experiment decides its claims under the protocol (issue
41): paired differences, a margin, controls and guards. A method not yet ported still runs and
reports its measurements, but every verdict reads "cannot tell: test bed under repair" and
names the issue (``repair_issue``) that ports it.
"""

from __future__ import annotations

import dataclasses
import importlib
import types

SCALE_FLAGS = {"smoke": ["--smoke"], "quick": ["--quick"], "full": []}


@dataclasses.dataclass(frozen=True)
class Method:
  """One method of the library and the evidence for it."""

  name: str  # as the README's tables name it
  module: str  # experiments.<module>: the experiment, its claims() and its page()
  paper: str  # short citation for the reports
  citation: str  # the README's paper cell (markdown)
  library: tuple[str, ...]  # the importable pieces (jaxlab / kernels_pallas modules)
  title: str | None = None  # the README's link text, where it differs from name
  summary: str = ""  # what the library holds, after the link in the README's methods table
  bench: str | None = None  # experiments.<bench>, timed against the anchor in the same run
  bench_args: dict[str, list[str]] | None = None  # scale -> the benchmark's argv
  ported: bool = False  # claims() follows experiments.protocol (see the module docstring)
  repair_issue: int | None = None  # the issue that ports an unported method

  def __post_init__(self):
    if self.bench is not None and set(self.bench_args or {}) != set(SCALE_FLAGS):
      raise ValueError(f"{self.module}: bench_args needs argv for scales {list(SCALE_FLAGS)}")
    if not self.ported and self.repair_issue is None:
      raise ValueError(f"{self.module}: an unported method names its repair_issue")

  @property
  def page(self) -> str:
    """The method's page, relative to the repository root."""
    return f"docs/methods/{self.module}.md"

  def experiment(self) -> types.ModuleType:
    return importlib.import_module(f"experiments.{self.module}")


@dataclasses.dataclass(frozen=True)
class Component:
  """A shared part with a page of its own but no claim of a paper (the LM toolkit)."""

  name: str
  page_module: str  # experiments.<page_module> owns the page's generated regions
  source: str  # the page's name and its generated regions' key prefix (docs/methods/<source>.md)
  summary: str
  library: tuple[str, ...]

  @property
  def page(self) -> str:
    return f"docs/methods/{self.source}.md"


METHODS: tuple[Method, ...] = (
    Method(
        name='Quantized Adam and Muon',
        module='quant_optim',
        paper='Tang, Li, Zou, arXiv:2510.21314',
        citation=('Tang, Li, Zou, *A Convergence Analysis of Adaptive Optimizers under Floating-'
                  'point Quantization*, arXiv:2510.21314'),
        summary='(optax transforms), float-format simulator, compact 8-bit moment storage',
        library=('jaxlab.quant', 'jaxlab.optim', 'kernels_pallas.quantized_adam'),
        bench='bench_quant_optim',
        bench_args={'smoke': ['--smoke'], 'quick': ['--quick'], 'full': []},
        repair_issue=42),
    Method(
        name='Incremental metric bipartite matching',
        module='matching_incremental',
        paper='OpenReview wnIanx0r0w',
        citation=('*Efficient Algorithms for Incremental Metric Bipartite Matching*, OpenReview '
                  'wnIanx0r0w'),
        summary='(push-relabel, exact, greedy)',
        library=('jaxlab.matching', 'kernels_pallas.matching'),
        bench='bench_matching',
        bench_args={'smoke': ['--n', '200'], 'quick': ['--quick'], 'full': []},
        repair_issue=42),
    Method(
        name='Flow Actor-Critic',
        module='flow_actor_critic',
        paper='Chae et al., arXiv:2602.18015',
        citation=('Chae et al., *Flow Actor-Critic for Offline Reinforcement Learning*, '
                  'arXiv:2602.18015'),
        summary=('(offline RL): flow utilities, FAC / FQL / unregularized agents, multi-goal point'
                 ' env, OGBench pointmaze data'),
        library=('jaxlab.nn.flows', 'jaxlab.rl', 'jaxlab.envs'),
        bench='bench_flow_actor_critic',
        bench_args={
            'smoke': ['--seeds', '1', '--steps', '20', '--hidden', '16', '--batch-size', '16'],
            'quick': ['--seeds', '2', '--steps', '100', '--hidden', '64', '64'],
            'full': [],
        },
        repair_issue=42),
    Method(
        name='DIPPER',
        module='dipper',
        paper='Singh et al., arXiv:2411.00361',
        citation=('Singh et al., *Direct Preference Optimization for Primitive-Enabled '
                  'Hierarchical RL*, arXiv:2411.00361'),
        summary=('(hierarchical RL with DPO): PointMaze / PointPush, goal-conditioned SAC + HER, '
                 'DIPPER / HIER / FLAT'),
        library=('jaxlab.rl', 'jaxlab.envs'),
        bench='bench_envs',
        bench_args={
            'smoke': ['--envs', '64', '--steps', '50'],
            'quick': ['--steps', '300'],
            'full': [],
        },
        repair_issue=42),
    Method(
        name='Fractal convergence of GD',
        module='fractal_gd',
        paper='Liang & Montufar, arXiv:2509.25351',
        citation='Liang & Montufar, arXiv:2509.25351',
        library=('jaxlab.dynamics.factorization', 'kernels_pallas.fractal_gd'),
        bench='bench_fractal_gd',
        bench_args={
            'smoke': ['--resolution', '32', '--max-steps', '200'],
            'quick': ['--resolution', '128', '--max-steps', '1000'],
            'full': [],
        },
        repair_issue=42),
    Method(
        name='Training re-evaluation curves',
        module='trec',
        paper='Bergsma et al., arXiv:2509.25380',
        citation='Bergsma et al., arXiv:2509.25380',
        library=('jaxlab.dynamics.trec', 'jaxlab.models'),
        repair_issue=42),
    Method(
        name='alpha-DPO for diffusion',
        module='alpha_dpo',
        paper='OpenReview wqbnA6PcKr',
        citation='OpenReview wqbnA6PcKr',
        library=('jaxlab.preference.alpha_dpo', 'jaxlab.models.ddpm'),
        repair_issue=42),
    Method(
        name='ReCouPLe',
        module='recouple',
        paper='Hwang et al., arXiv:2603.04861',
        citation='Hwang et al., arXiv:2603.04861',
        library=('jaxlab.preference.recouple',),
        repair_issue=42),
    Method(
        name='Test-Time Matching',
        module='ttm',
        paper='Zhu et al., arXiv:2510.07632',
        citation='Zhu et al., arXiv:2510.07632',
        library=('jaxlab.preference.ttm',),
        ported=True),
    Method(
        name='AdaBack',
        module='adaback',
        paper='Amani, Lotfi et al., arXiv:2506.18110',
        citation=('Amani, Lotfi et al., *RL for Reasoning by Adaptively Revealing Rationales*, '
                  'arXiv:2506.18110'),
        summary='per-sample reveal curricula for GRPO, latent parity',
        library=('jaxlab.lm.adaback',),
        repair_issue=44),
    Method(
        name='Expert Divergence Learning',
        module='expert_divergence',
        paper='Expert Divergence Learning for MoE-based Language Models, arXiv:2603.00054',
        citation='*Expert Divergence Learning for MoE-based Language Models*, arXiv:2603.00054',
        summary='(domain-divergent MoE routing)',
        library=('jaxlab.lm.expert_divergence',),
        repair_issue=44),
    Method(
        name='CoCoMix',
        module='cocomix',
        paper='Tack et al., arXiv:2502.08524',
        citation='Tack et al., *LLM Pretraining with Continuous Concepts*, arXiv:2502.08524',
        summary=('LM pretraining with continuous concepts (TopK SAE on a teacher, attribution '
                 'labels, concept prediction and interleaving)'),
        library=('jaxlab.lm.cocomix',),
        repair_issue=44),
    Method(
        name='ssToken',
        module='sstoken',
        paper='arXiv:2510.18250',
        citation=('*ssToken: Self-modulated and Semantic-aware Token Selection for LLM Fine-'
                  'tuning*, arXiv:2510.18250'),
        summary='loss- and attention-scored token selection for SFT, noisy sort / reverse',
        library=('jaxlab.lm.sstoken',),
        repair_issue=44),
    Method(
        name='SFDD',
        module='sfdd',
        paper='arXiv:2601.18902',
        citation=('*Flatter Tokens are More Valuable for Speculative Draft Model Training*, '
                  'arXiv:2601.18902'),
        summary="train the speculative draft on the target's flattest samples",
        library=('jaxlab.lm.sfdd',),
        repair_issue=44),
    Method(
        name='Cascadia',
        module='cascadia',
        paper='Jiang et al., arXiv:2506.04203',
        citation=('Jiang et al., *Cascadia: An Efficient Cascade Serving System for Large Language'
                  ' Models*, arXiv:2506.04203'),
        summary=('cascade thresholds by a Chebyshev-penalized search, workers per model by a MILP,'
                 ' M/M/c latency tables'),
        library=('jaxlab.inference.cascadia',),
        repair_issue=45),
    Method(
        name='G-NLL',
        module='g_nll',
        paper='Aichberger et al., arXiv:2412.15176',
        citation=('Aichberger, Schweighofer, Hochreiter, *Rethinking Uncertainty Estimation in '
                  'LLMs: A Principled Single-Sequence Measure*, arXiv:2412.15176'),
        summary=("the greedy answer's negative log-likelihood as an uncertainty score, against PE "
                 "/ LN-PE / SE / D-SE from N sampled answers (the paper's N = 10), on synthetic "
                 'fact QA'),
        library=('jaxlab.inference.g_nll', 'jaxlab.data.fact_qa'),
        repair_issue=45),
    Method(
        name='FreeKV',
        module='freekv',
        paper='Liu et al., arXiv:2505.13109',
        citation=('Liu et al., *FreeKV: Boosting KV Cache Retrieval for Efficient LLM Inference*, '
                  'arXiv:2505.13109'),
        summary=('speculative KV-page retrieval with correction at decode time, page-score and '
                 'page-attention kernels'),
        library=('jaxlab.inference.freekv', 'kernels_pallas.page_attention'),
        bench='bench_freekv',
        bench_args={'smoke': ['--smoke'], 'quick': ['--quick'], 'full': []},
        repair_issue=45),
    Method(
        name='Planned Diffusion',
        module='planned_diffusion',
        paper='arXiv:2510.18087',
        citation='*Planned Diffusion*, arXiv:2510.18087',
        summary=('an autoregressive plan, then its spans denoised in parallel (plan-format '
                 'attention mask, hybrid loss, per-block confidence unmasking)'),
        library=('jaxlab.inference.planned_diffusion', 'jaxlab.data.span_tasks'),
        repair_issue=45),
    Method(
        name='FastFlow',
        module='fastflow',
        paper='arXiv:2602.11105',
        citation=('*FastFlow: Accelerating Generative Flow Matching Models with Bandit Inference*,'
                  ' arXiv:2602.11105'),
        summary=('bandit-chosen step skipping in flow sampling (finite-difference velocity '
                 'extrapolation, one UCB1 bandit per step index, forced evaluations), a hook of '
                 'the shared Euler sampler; the shared sample-quality yardstick (Frechet distance,'
                 ' class accuracy of generated digits)'),
        library=('jaxlab.generative.fastflow', 'jaxlab.models.sample_quality'),
        repair_issue=46),
    Method(
        name='DistillKac',
        module='distill_kac',
        paper='arXiv:2509.21513',
        citation=('*DistillKac: Few-Step Image Generation via Damped Wave Equations*, '
                  'arXiv:2509.21513'),
        summary=('damped-wave (Kac) flows (exact Kac simulation, marginal density, Bessel-ratio '
                 'velocity), Euler and AB-2 sampling as a hook of the shared Euler sampler, '
                 'velocity-space CFG, endpoint-only distillation in stages 100 -> 20 -> 4 -> 2 -> '
                 '1'),
        library=('jaxlab.generative.distill_kac',),
        repair_issue=46),
    Method(
        name='Lumos-1',
        module='lumos',
        paper='arXiv:2507.08801',
        citation=('Yuan et al., *Lumos-1: On Autoregressive Video Generation from a Unified Model '
                  'Perspective*, arXiv:2507.08801'),
        summary=('autoregressive video generation on the toolkit transformer: MM-RoPE (rotary '
                 "pairs interleaved over t / h / w, positions scaled by the tokenizer's strides), "
                 'AR-DF attention (causal across frames, bidirectional within), tube masking, per-'
                 'frame MaskGIT decoding with a partially masked history; moving-digit videos in 2'
                 ' x 2 patch tokens'),
        library=('jaxlab.generative.lumos', 'jaxlab.data.moving_digits'),
        repair_issue=46),
    Method(
        name='RedacBench',
        module='redacbench',
        paper='arXiv:2603.20208',
        citation='*RedacBench: Can AI Erase Your Secrets?*, arXiv:2603.20208',
        summary=('proposition-based Security and Utility of a redaction (implied propositions by '
                 'forward chaining, the exact closure judge, micro and per-text pooling), keyword '
                 'masking vs a learned keep/drop rewriter once and iterated, on rendered fact '
                 'texts'),
        library=('jaxlab.safety.redacbench', 'jaxlab.data.fact_texts'),
        repair_issue=47),
    Method(
        name='VIRF',
        module='virf',
        paper='arXiv:2602.08373',
        citation='VIRF, arXiv:2602.08373',
        summary=('a symbolic tutor that simulates a plan state by state against Horn hazard rules '
                 'with danger levels (hazards deduplicated by (rule, subject), UNKNOWN > UNSAFE > '
                 'WARNING > SAFE, structured feedback with the causal chain), and a tiny planner '
                 'repairing from it; a symbolic kitchen world'),
        library=('jaxlab.safety.virf', 'jaxlab.data.kitchen'),
        repair_issue=47),
    Method(
        name='ATA',
        module='ata',
        paper='OpenReview wwA0X3UfAn',
        citation='ATA, OpenReview wwA0X3UfAn',
        summary=('attend to the active subtask: mutual and dynamic masks on selected heads (ranked'
                 ' by attention mass on the gold active span), the active-subtask score with its '
                 'entropy gate and the chain / branch / parallel rules, greedy decoding through '
                 "the KV cache's attention hook; multi-subtask prompts with gold spans"),
        library=('jaxlab.safety.ata', 'jaxlab.data.subtasks'),
        repair_issue=47),
    Method(
        name='TTOM',
        module='ttom',
        paper='Qu et al., arXiv:2510.07940',
        citation=('*TTOM: Test-Time Optimization and Memorization for Compositional Video '
                  'Generation*, arXiv:2510.07940'),
        summary=("test-time optimisation of LoRA adapters on one layer's cross-attention toward a "
                 'layout (JSD between instance cross-attention maps and Gaussian box targets, '
                 'early stopping, adapters off after the first steps) as a hook of the shared DDPM'
                 ' sampler, a memory of adapters keyed by the layout (insert / read / update / '
                 'delete, LFU eviction), the latent-guidance baseline; shared LoRA adapters and '
                 'layout-conditioned digits'),
        library=('jaxlab.generative.ttom', 'jaxlab.nn.lora', 'jaxlab.data.digit_layouts'),
        repair_issue=46),
    Method(
        name='TRU',
        module='tru',
        paper='arXiv:2603.09980',
        citation='TRU, *Explainable LLM Unlearning through Reasoning*, arXiv:2603.09980',
        summary=('unlearning by reasoning targets (the target loss over a reasoning trace and a '
                 'response, plus alpha times gradient difference) against gradient ascent, '
                 'gradient difference, NPO and "I don\'t know" SFT, as reusable pure losses; entity'
                 ' facts in two templates grouped in domains'),
        library=('jaxlab.safety.tru', 'jaxlab.data.entity_facts'),
        repair_issue=47),
    Method(
        name='ASGuard',
        module='asguard',
        paper='arXiv:2509.25843',
        citation='ASGuard, arXiv:2509.25843',
        summary=('head attribution (integrated gradients on the refusal log-probability, checked '
                 'against activation patching), the vulnerable-head set, per-head scaling vectors '
                 "trained alone (pre-W_O, and the official code's post-projection version as an "
                 'ablation), preventive fine-tuning with the scales frozen and unloaded; a past-'
                 'tense jailbreak test bed'),
        library=('jaxlab.safety.asguard', 'jaxlab.data.tense_requests'),
        repair_issue=47),
    Method(
        name='DL4ND',
        module='dl4nd',
        paper='Wang et al., arXiv:2504.02996',
        citation='*Noise-Aware Generalization*, arXiv:2504.02996',
        summary=('noise detection by a two-component GMM on per-sample losses after warm-up, clean'
                 ' per-(class, domain) feature proxies, one-shot relabelling of the suspects by '
                 'the nearest proxy (cosine) in another domain, with the within-domain and all-'
                 'sample-proxy ablations; rotated-digit domains with exact asymmetric noise and '
                 'leave-one-domain-out splits'),
        library=('jaxlab.vision.dl4nd', 'jaxlab.data.rotated_digits'),
        repair_issue=49),
    Method(
        name='EgoWorld',
        module='egoworld',
        paper='Park, Ye, Kwon, arXiv:2506.17896',
        citation='EgoWorld, arXiv:2506.17896',
        summary=('exocentric-to-egocentric reprojection: median depth-scale alignment over the '
                 'hand, back-projection, Umeyama similarity from the hand keypoints (with the '
                 'reflection fix), a jittable scatter-min z-buffered splat giving the sparse '
                 'egocentric map and its coverage; ray-cast two-camera scenes with known geometry,'
                 ' an unknown depth scale, depth and keypoint noise'),
        library=('jaxlab.vision.egoworld', 'jaxlab.data.two_camera_scenes'),
        repair_issue=49),
    Method(
        name='TVI',
        module='tvi',
        paper='Long et al., arXiv:2509.23050',
        citation=('Long, Oh, Park, Li, *Understanding Language Prior of LVLMs by Contrasting '
                  'Chain-of-Embedding*, arXiv:2509.23050'),
        summary=('a tiny vision-language model (digit patch tokens + question tokens on the '
                 'toolkit transformer), the blind pass with a learned null image, the chain-of-'
                 'embedding distance profile, the visual integration point, the TVI score and '
                 'regulariser; digit questions with a hint token that conflicts at test'),
        library=('jaxlab.vision.tvi', 'jaxlab.data.digit_questions'),
        repair_issue=48),
    Method(
        name='CARE',
        module='care',
        paper='arXiv:2603.01607',
        citation=('*Towards Clinical Accountability in Multi-Modal Medical Reasoning with an '
                  'Evidence-Grounded Agentic Framework*, arXiv:2603.01607'),
        summary=('the entity reward (Hungarian-matched cosine similarity of entity embeddings '
                 "through optax's jittable solver, count, repetition and format terms; greedy and "
                 'binary baselines), the mask confidence 1 - H(M)/log 2 with its 0.7 filter, crop '
                 '/ masked / global evidence views with a majority vote; region questions on digit'
                 ' canvases and a REINFORCE set-prediction toy'),
        library=('jaxlab.vision.care', 'jaxlab.data.region_questions'),
        repair_issue=49),
    Method(
        name='LLMs are Greedy Agents',
        module='greedy',
        paper='Schmied et al., arXiv:2504.16078',
        citation=('Schmied et al., *LLMs are Greedy Agents: Effects of RL Fine-tuning on Decision-'
                  'Making Abilities*, arXiv:2504.16078'),
        title='LLMs are greedy agents',
        summary=('K-armed Bernoulli / Gaussian bandits (K = 5, 10, 20, arm means per episode, 50 '
                 'steps), UCB and random baselines, coverage, frequency bias, the knowing-doing '
                 'gap and regret; a rationale-then-action transformer given greedy and frequency '
                 "biases by behaviour cloning, RL fine-tuned with the toolkit's clipped policy "
                 'gradient (returns-to-go, KL to the reference, -5 invalid-action penalty, +1 '
                 'exploration bonus) and its ablations'),
        library=('jaxlab.agents.greedy', 'jaxlab.envs.bandits'),
        repair_issue=48),
    Method(
        name='SatDreamer360',
        module='satdreamer',
        paper='Ze et al., arXiv:2506.00600',
        citation='Ze et al., *SatDreamer360*, arXiv:2506.00600',
        summary=('ray-based triplane retrieval (F(x) = F_xy + F_xz + F_yz by bilinear lookup, K '
                 'depth samples per panorama ray with learned offsets and weights) and panoramic '
                 'epipolar attention (candidates nearest the epipolar great circle f_n^T [t]_x R '
                 'f_m = 0) against global cross-attention, BEV-only and full attention; a '
                 'procedural city with exactly ray-cast panoramas'),
        library=('jaxlab.vision.satdreamer', 'jaxlab.data.city_panoramas'),
        repair_issue=49),
    Method(
        name='VPRL',
        module='vprl',
        paper='Xu et al., arXiv:2505.11409',
        citation='Visual Planning, arXiv:2505.11409',
        summary=('visual planning by generating the next image on grid worlds with the layout in '
                 'the state (frozen lakes and mazes, 4-6 cells, a BFS distance map as the '
                 'solvability check, one image token per cell), the action parsed from each image '
                 'pair, the progress reward, stage 1 SFT on random trajectories then GRPO (the '
                 "toolkit's policy gradient), the VPFT baseline, greedy multi-step plans on held-"
                 'out maps'),
        library=('jaxlab.agents.vprl', 'jaxlab.envs.grid_world'),
        repair_issue=48),
)

COMPONENTS: tuple[Component, ...] = (
    Component(
        name="Language-model toolkit", page_module="bench_lm", source="lm_toolkit",
        summary=("(shared by the LM methods): RoPE / MoE / cross-attention transformer with "
                 "per-call masks and hooks, KV-cache decoding, beam search, masked-diffusion "
                 "sampling, GRPO, synthetic tasks, data-parallel / FSDP sharding, block-sparse "
                 "attention kernel"),
        library=("jaxlab.models", "jaxlab.data.lm_tasks", "jaxlab.training.sharding",
                 "kernels_pallas.block_sparse_attention")),
)

# Generated-region sources beyond the methods' own: key prefix -> experiments.<module>
EXTRA_PAGES: dict[str, str] = {"matching_diagnosis": "matching_diagnosis"}


def by_module(module: str) -> Method:
  """The method whose experiment is ``experiments.<module>``."""
  for m in METHODS:
    if m.module == module:
      return m
  raise KeyError(f"no method with module {module!r} (known: {[m.module for m in METHODS]})")


def page_sources() -> dict[str, str]:
  """Generated-region key prefix -> the experiments module whose ``page()`` fills it."""
  return {**{m.module: m.module for m in METHODS},
          **{c.source: c.page_module for c in COMPONENTS}, **EXTRA_PAGES}
