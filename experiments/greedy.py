"""LLMs are greedy agents: greediness, frequency bias and the knowing-doing gap before and after
RL fine-tuning, against UCB and random, on K-armed Bernoulli bandits.

    python -m experiments.greedy [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed (``jaxlab.agents.greedy``, ``jaxlab.envs.bandits``; arm means ~ U(0, 1) redrawn per
episode, ``horizon`` steps):

1. behaviour-cloning data: ``bc_episodes`` episodes, each epsilon-greedy (share
   ``greedy_share``), UCB (share ``ucb_share``: the cloned policy acts on its rationale at a
   low rate, as the paper's LLMs do) or copy (repeat the most frequent action), with each
   step's rationale label the UCB arm (constant ``ucb_c``) of the history before it;
2. two sequence policies (toolkit transformers) trained on it by next-token loss on the
   rationale and action tokens: one emitting ``why, arm`` per step, one ``arm`` only (the
   "no rationale" ablation). These are the "before RLFT" policies: their greediness and
   frequency bias come from the cloned traces, their knowledge from the rationale labels;
3. RLFT (clipped policy gradient, returns-to-go, k3 KL to the BC policy) for ``rl_iters``
   iterations of ``rl_episodes`` episodes: the rationale policy with the -5 invalid-action
   penalty and the +1 bonus for untried arms (``rlft``), without the bonus
   (``no_bonus``), without the penalty (``no_penalty``) (one vmapped program), and the
   no-rationale policy with both (``no_rationale``);
4. on ``eval_episodes`` fresh episodes: cumulative regret, coverage C_T, invalid actions,
   the knowing-doing rates, and the frequency probe (one arm repeated up to
   ``max_repeats`` times, the share of the action probability on it and the action
   entropy, with the rationale teacher-forced to the UCB arm), for every policy and for
   UCB, UCB1 (c = sqrt 2) and random.

The paper (Gemma-2 2B-27B on BanditBench) finds RLFT lowers regret, raises coverage and
P(action = rationale | rationale correct), lowers frequency bias, and leaves the agent below
UCB. The gap is built in here by behaviour cloning; a claim checks that it occurs before RLFT.
A larger run for a GPU: ``--d-model 128 --layers 4 --bc-episodes 8192 --bc-steps 4000
--rl-iters 500 --rl-episodes 128 --eval-episodes 1024 --num-arms 10``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.agents import greedy as gr
from jaxlab.envs import bandits
from jaxlab.models import transformer as tfm

RL_ARMS = ("rlft", "no_bonus", "no_penalty")  # the rationale policy's RL arms (vmapped)
SHAPING = {"rlft": (5.0, 1.0), "no_bonus": (5.0, 0.0), "no_penalty": (0.0, 1.0)}
POLICIES = ("bc", *RL_ARMS, "bc_no_rationale", "no_rationale")
BASELINES = ("ucb", "ucb1", "random")
ROWS = ("ucb", "ucb1", "random", *POLICIES)
KEEP = 0.05  # claim 7: the largest fall of P(rationale correct) that still "keeps" it

CONFIGS = {
    "smoke": dict(seeds=1, num_arms=3, kind="bernoulli", horizon=8, ucb_c=0.5,
                  bc_episodes=64, greedy_share=0.4, ucb_share=0.2, bc_steps=4, bc_batch=8,
                  bc_lr=1e-3, d_model=16, heads=2, layers=1, rl_iters=2, rl_episodes=8,
                  rl_minibatch=8, rl_group=4, rl_lr=1e-3, kl_coef=0.05, gamma=1.0,
                  eval_episodes=8, probe_num=8, max_repeats=4),
    "quick": dict(seeds=1, num_arms=5, kind="bernoulli", horizon=50, ucb_c=0.5,
                  bc_episodes=1024, greedy_share=0.4, ucb_share=0.2, bc_steps=150,
                  bc_batch=16, bc_lr=2e-3, d_model=32, heads=2, layers=2, rl_iters=10,
                  rl_episodes=16, rl_minibatch=16, rl_group=8, rl_lr=1e-3, kl_coef=0.05,
                  gamma=1.0, eval_episodes=64, probe_num=32, max_repeats=30),
    "full": dict(seeds=3, num_arms=5, kind="bernoulli", horizon=50, ucb_c=0.5,
                 bc_episodes=2048, greedy_share=0.4, ucb_share=0.2, bc_steps=400,
                 bc_batch=32, bc_lr=2e-3, d_model=32, heads=2, layers=2, rl_iters=50,
                 rl_episodes=32, rl_minibatch=32, rl_group=8, rl_lr=1e-3, kl_coef=0.05,
                 gamma=1.0, eval_episodes=128, probe_num=64, max_repeats=30),
}


def _params(cfg: dict) -> bandits.BanditParams:
  return bandits.BanditParams(num_arms=cfg["num_arms"], kind=cfg["kind"],
                              max_steps_in_episode=cfg["horizon"])


RL_SETS = (*RL_ARMS, "no_rationale")  # every RL arm: one vmapped program
RL_FLAGS = {"rlft": True, "no_bonus": True, "no_penalty": True, "no_rationale": False}
SHAPING["no_rationale"] = (5.0, 1.0)
EVAL_SETS = ("bc", "bc_no_rationale", *RL_SETS)  # every policy: one program


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one configuration, compiled once and shared by every seed. The
  rationale and no-rationale policies share every shape (the blank fills the rationale
  slot), so each stage is one program vmapped (or mapped) over the policies."""
  params = _params(cfg)
  h, c = cfg["horizon"], cfg["ucb_c"]
  spec = gr.token_spec(params)
  tcfg = tfm.TransformerConfig(spec.vocab_size, cfg["d_model"], cfg["heads"], cfg["layers"],
                               spec.seq_len(h))
  net = tfm.graph(tcfg)
  rl_cfg = gr.RLFTConfig(episodes=cfg["rl_episodes"], minibatch_size=cfg["rl_minibatch"],
                         kl_coef=cfg["kl_coef"], gamma=cfg["gamma"], ucb_c=c,
                         group_size=cfg["rl_group"], horizon=h)
  rl_opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(cfg["rl_lr"]))

  @jax.jit
  def behaviour_clone(key, trace):
    """Two policies from one set of traces: with rationale tokens, and with the blank."""
    def one(k, rationale):
      tokens = gr.episode_tokens(spec, trace.actions, trace.ucb, trace.rewards)
      tokens = tokens.at[:, 1::3].set(jnp.where(rationale, tokens[:, 1::3], spec.PAD))
      mask = jnp.broadcast_to(gr.loss_mask(spec, h, rationale),
                              (tokens.shape[0], tokens.shape[1] - 1))
      return tfm.fit_next_token(k, tcfg, tokens, mask, optax.adam(cfg["bc_lr"]),
                                num_steps=cfg["bc_steps"], batch_size=cfg["bc_batch"])

    return jax.vmap(one)(jax.random.split(key, 2), jnp.array([True, False]))

  @jax.jit
  def rlft(key, init_params, penalty, bonus, rationale):
    """RL arms ``(A,)``: initial (= reference) parameters, shaping and rationale flag."""
    def one(p0, pen, bon, flag):
      iteration = gr.make_rlft(net.replace(params=p0), rl_opt, p0, spec, params, rl_cfg)

      def body(state, k):
        return iteration(state, k, gr.Shaping(pen, bon), flag)

      state = gr.RLState(p0, rl_opt.init(p0))
      state, curve = jax.lax.scan(body, state, jax.random.split(key, cfg["rl_iters"]))
      return state.params, curve

    return jax.vmap(one)(init_params, penalty, bonus, rationale)

  @jax.jit
  def evaluate(key, stacked_params, rationale):
    """Metrics of each parameter set ``(P, ...)`` on the same episodes and probes."""
    k_means, k_roll, k_probe = jax.random.split(key, 3)
    means = jax.vmap(bandits.arm_means, (0, None))(
        jax.random.split(k_means, cfg["eval_episodes"]), params)

    def one(args):
      p, flag = args
      policy = net.replace(params=p)
      ep = gr.rollout(policy, k_roll, means, spec, params, rationale=flag, c=c, horizon=h)
      m = gr.episode_metrics(ep.actions, means, ep.ucb, ep.greedy, ep.rationales)
      probe = gr.frequency_probe(policy, k_probe, spec, params, cfg["probe_num"],
                                 cfg["max_repeats"], rationale=flag, c=c)
      return {**m, "freq_share": probe["share"], "freq_entropy": probe["entropy"],
              "freq_rationale_prob": probe["rationale_prob"]}

    return jax.lax.map(one, (stacked_params, rationale))

  @jax.jit
  def baselines(key):
    k_ep, k_probe = jax.random.split(key)
    out = {}
    for name, policy, cc in (("ucb", "ucb", c), ("ucb1", "ucb", gr.UCB1_C),
                             ("random", "random", c)):
      tr = gr._run_baseline(k_ep, params, policy, cfg["eval_episodes"], cc, 0.1, h)
      m = gr.episode_metrics(tr.actions, tr.means, tr.ucb, tr.greedy)
      acts, rews, targets = gr.frequency_histories(k_probe, params, cfg["probe_num"],
                                                   cfg["max_repeats"] + 1)
      counts, sums = gr.prefix_stats(acts, rews, params.num_arms)
      steps = params.num_arms + jnp.arange(cfg["max_repeats"] + 1)
      if policy == "ucb":
        pick = jax.nn.one_hot(gr.ucb_arm(counts, sums, cc)[:, steps], params.num_arms)
      else:
        pick = jnp.full((*targets.shape, len(steps), params.num_arms), 1 / params.num_arms)
      fb = jax.vmap(gr.frequency_bias, (1, None))(pick, targets)
      out[name] = {**m, "freq_share": fb["share"], "freq_entropy": fb["entropy"]}
    return out

  @jax.jit
  def behaviour(key):
    return gr._behaviour(key, params, cfg["bc_episodes"], cfg["greedy_share"],
                         cfg["ucb_share"], 0.1, c, h)

  return {"behaviour": behaviour, "behaviour_clone": behaviour_clone, "rlft": rlft,
          "evaluate": evaluate, "baselines": baselines}


def _host(tree) -> dict:
  return jax.tree.map(lambda x: np.asarray(x).tolist(), jax.device_get(tree))


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  key = jax.random.key(seed)
  k_data, k_bc, k_rl, k_eval, k_base = jax.random.split(key, 5)
  trace = prog["behaviour"](k_data)
  m = gr.episode_metrics(trace.actions, trace.means, trace.ucb, trace.greedy)
  bc, bc_loss = prog["behaviour_clone"](k_bc, trace)  # [rationale, blank]
  start = jnp.array([0 if RL_FLAGS[a] else 1 for a in RL_SETS])
  init = jax.tree.map(lambda x: x[start], bc)
  rl, curve = prog["rlft"](k_rl, init, *(jnp.array([SHAPING[a][i] for a in RL_SETS])
                                         for i in range(2)),
                           jnp.array([RL_FLAGS[a] for a in RL_SETS]))
  stack = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), bc, rl)
  flags = jnp.array([True, False, *(RL_FLAGS[a] for a in RL_SETS)])
  ev = _host(prog["evaluate"](k_eval, stack, flags))
  rows = {name: {k: v[i] for k, v in ev.items()} for i, name in enumerate(EVAL_SETS)}
  for name in ("bc_no_rationale", "no_rationale"):  # no rationale: no knowing-doing rates
    for metric in ("rationale_correct", "act_rationale_given_correct",
                   "act_greedy_given_correct", "freq_rationale_prob"):
      rows[name].pop(metric)
  rows.update(_host(prog["baselines"](k_base)))
  curves = _host({a: {k: v[i] for k, v in curve.items()} for i, a in enumerate(RL_SETS)})
  losses = np.asarray(bc_loss)
  return {"seed": seed, "policies": rows, "rl_curves": curves,
          "bc_loss": float(np.mean(losses[0, -20:])),
          "bc_no_rationale_loss": float(np.mean(losses[1, -20:])),
          "behaviour": {"regret": float(m["regret"]), "coverage": float(m["coverage"])}}


def _vals(result: dict, policy: str, metric: str, index: int | None = None) -> np.ndarray:
  out = []
  for r in result["runs"]:
    v = r["policies"][policy][metric]
    out.append(v[index] if index is not None else v)
  return np.asarray(out, np.float64)


def claims(result: dict) -> list[Claim]:
  """The paper's claims from a ``results.json`` dict (paired by seed; ``n`` seeds):

  0. The built-in gap occurs before RLFT: the BC policy's rationale is right more often than
     chance (> 2/K), it acts on it less often than greedily (P(a = rationale | correct) <
     P(a = greedy | correct)), its coverage is below UCB's and its frequency share after
     ``max_repeats`` repeats is above 1/K.
  1. RLFT lowers regret (mean and every seed); 2. raises coverage; 3. raises
     P(a = rationale | rationale correct); 4. lowers the frequency share at ``max_repeats``
     repeats; 5. the RLFT agent stays below UCB (higher regret, every seed);
  6. the exploration bonus raises coverage (rlft vs no_bonus, every seed);
  7. RLFT keeps the rationale correct (P(rationale correct) falls by at most ``KEEP``, every
     seed): rationale and action are trained together, so the gap can also close by the
     rationale moving to the action.
  """
  if not result["runs"]:
    return []
  n = len(result["runs"])
  k = result["config"]["num_arms"]
  v = functools.partial(_vals, result)
  last = -1
  rc, ar, ag = (v("bc", x) for x in ("rationale_correct", "act_rationale_given_correct",
                                     "act_greedy_given_correct"))
  cov_bc, cov_ucb = v("bc", "coverage"), v("ucb", "coverage")
  fs_bc = v("bc", "freq_share", last)
  built = (rc.mean() > 2 / k and ar.mean() < ag.mean() and cov_bc.mean() < cov_ucb.mean()
           and fs_bc.mean() > 1 / k)
  rows = [Claim(
      "Before RLFT the policy is greedy, frequency-biased and knows more than it does",
      f"P(rationale correct) {pm(rc)} (chance {1 / k:.2f}); P(a = rationale, given correct) "
      f"{pm(ar)} vs P(a = greedy, given correct) {pm(ag)}; coverage {pm(cov_bc)} vs UCB "
      f"{pm(cov_ucb)}; share on an arm repeated {result['config']['max_repeats']} times "
      f"{pm(fs_bc)} (1/K = {1 / k:.2f})", bool(built))]

  def paired(label, metric, lower, index=None, a="bc", b="rlft", fmt=".3f"):
    x, y = v(a, metric, index), v(b, metric, index)
    wins = int(np.sum(y < x)) if lower else int(np.sum(y > x))
    ok = (y.mean() < x.mean()) if lower else (y.mean() > x.mean())
    return Claim(label, f"{pm(x, fmt)} -> {pm(y, fmt)}; in {wins}/{n} seeds", bool(ok and
                                                                                  wins == n))

  rows.append(paired("RLFT lowers the cumulative regret", "regret", True, fmt=".2f"))
  rows.append(paired("RLFT raises the action coverage", "coverage", False))
  rows.append(paired("RLFT raises P(action = rationale, given a correct rationale)",
                     "act_rationale_given_correct", False))
  rows.append(paired("RLFT lowers the frequency bias (share on the repeated arm)",
                     "freq_share", True, index=last))
  reg, ucb = v("rlft", "regret"), v("ucb", "regret")
  below = int(np.sum(reg > ucb))
  rows.append(Claim("The RLFT agent stays below UCB",
                    f"regret {pm(reg, '.2f')} vs UCB {pm(ucb, '.2f')}; worse in {below}/{n} "
                    "seeds", bool(below == n)))
  rows.append(paired("The exploration bonus raises coverage (without -> with)", "coverage",
                     False, a="no_bonus", b="rlft"))
  before, after = v("bc", "rationale_correct"), v("rlft", "rationale_correct")
  kept = int(np.sum(after >= before - KEEP))
  rows.append(Claim("RLFT keeps the knowledge: the rationale stays the UCB arm",
                    f"P(rationale correct) {pm(before)} -> {pm(after)}; within {KEEP} of "
                    f"before in {kept}/{n} seeds", bool(kept == n)))
  return rows


TABLE_HEAD = ["policy", "regret", "coverage", "invalid", "P(why ok)", "P(a = why, given ok)",
              "P(a = greedy, given ok)", "freq. share", "entropy"]


def table_rows(result: dict) -> list[list[str]]:
  """One row per policy and baseline: mean ± std over seeds."""
  out = []
  for name in ROWS:
    row = [name, pm(_vals(result, name, "regret"), ".2f"),
           pm(_vals(result, name, "coverage")), pm(_vals(result, name, "invalid"))]
    for metric in ("rationale_correct", "act_rationale_given_correct",
                   "act_greedy_given_correct"):
      has = metric in result["runs"][0]["policies"][name]
      row.append(pm(_vals(result, name, metric)) if has else "-")
    row += [pm(_vals(result, name, "freq_share", -1)), pm(_vals(result, name, "freq_entropy",
                                                               -1))]
    out.append(row)
  return out


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
  colors = {"ucb": "k", "ucb1": "0.55", "random": "C8", "bc": "C3", "rlft": "C0",
            "no_bonus": "C1", "no_penalty": "C2", "bc_no_rationale": "C5", "no_rationale": "C4"}
  for name in ROWS:
    style = "--" if name in BASELINES else "-"
    for ax, metric in zip(axes[:2], ("regret_curve", "coverage_curve"), strict=True):
      curve = np.mean([r["policies"][name][metric] for r in result["runs"]], 0)
      ax.plot(np.arange(1, len(curve) + 1), curve, style, color=colors[name], label=name)
    share = np.mean([r["policies"][name]["freq_share"] for r in result["runs"]], 0)
    axes[2].plot(np.arange(len(share)), share, style, color=colors[name], label=name)
  axes[0].set(xlabel="step t", ylabel="cumulative regret")
  axes[1].set(xlabel="step t", ylabel="coverage C_t")
  axes[2].set(xlabel="repeats k of one arm", ylabel="P(pick the repeated arm)")
  axes[2].legend(fontsize=7)
  n = len(result["runs"])
  fig.suptitle(f"{result['config']['num_arms']}-armed {result['config']['kind']} bandit, "
               f"{n} seed{'s' if n > 1 else ''} (mean)")
  save_figure(fig, out, "greedy.png")
  return ["greedy.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/greedy",
                       quick_help="1 seed, small model, 20 RL iterations: the pipeline in "
                                  "about a minute",
                       helps={"num_arms": "arms K", "kind": "bernoulli or gaussian",
                              "ucb_c": "UCB's exploration constant (rationale labels, baseline)",
                              "bc_episodes": "behaviour-cloning episodes (greedy / copy)",
                              "rl_iters": "RLFT iterations", "rl_episodes": "episodes per "
                              "iteration", "rl_group": "episodes per bandit instance (the "
                              "advantages' group)", "max_repeats": "frequency probe: most repeats"},
                       choices={"kind": bandits.KINDS})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def note(result: dict) -> str:
  c = result["config"]
  return (f"{c['seeds']} seeds, mean ± std over seeds; {c['num_arms']}-armed {c['kind']} "
          f"bandit, {c['horizon']} steps, {c['eval_episodes']} evaluation episodes; UCB "
          f"c = {c['ucb_c']}, UCB1 c = {math.sqrt(2):.3f}.")


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "greedy")
    return {"runs": runs}

  return run_experiment(argv, cli(), "greedy", run, plot, _table, note,
                        after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/greedy.md


def _report(record: dict) -> str:
  c, runs = record["config"], record["runs"]
  bc = np.array([r["bc_loss"] for r in runs])
  behaviour = np.array([r["behaviour"]["regret"] for r in runs])
  cover = np.array([r["behaviour"]["coverage"] for r in runs])
  spread = (f"{c['seeds']} seeds, {P.seconds(record['wall_time_s'])}; mean ± std over seeds"
            if c["seeds"] > 1 else f"1 seed, {P.seconds(record['wall_time_s'])}")
  return ("\n" + f"{c['num_arms']}-armed {c['kind']} bandit, {c['horizon']} steps, UCB "
          f"c = {c['ucb_c']}; policy {c['layers']} layers d = {c['d_model']}, behaviour "
          f"cloning on {P.thousands(c['bc_episodes'])} episodes, epsilon-greedy / UCB / copy in "
          f"shares {c['greedy_share']:g} / {c['ucb_share']:g} / "
          f"{1 - c['greedy_share'] - c['ucb_share']:g} (behaviour regret "
          f"{P.pm(behaviour)}, coverage {P.pm(cover)}) for {P.thousands(c['bc_steps'])} steps "
          f"(final loss {P.pm(bc)}), RLFT {c['rl_iters']} iterations of {c['rl_episodes']} "
          f"episodes (lr {c['rl_lr']:g}, KL coefficient {c['kl_coef']:g}); "
          f"{c['eval_episodes']} evaluation episodes; {spread}. The frequency share and "
          f"entropy are read after {c['max_repeats']} repeats of one arm:\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + P.claims_table("greedy", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("greedy", _report)


if __name__ == "__main__":
  main()
