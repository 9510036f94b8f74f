"""Retrospex's dynamic action rescoring as a rollout-engine ``ActionSelector`` (docs/retrospex.md, 4. Rescoring at
inference): the action selector ``retrospex`` (``action.selector=retrospex``, settings ``action.retrospex``), built by
``build_selector`` through the public registry ``empo2.selectors``.

Per live episode and step t (``select``):

1. **Proposals**: k samples of the policy from the episode's prompt (``action.retrospex.temperature``;
   the authors used k beams on ScienceWorld and k samples on WebShop), constrained by the
   admissible-action trie when ``action.mode`` is ``constrained``. The prompt is prefilled once per
   turn into the episode's KV cache and the k rows fork it.
2. **Grounding** to k admissible candidates (``grounding.ground_candidates``: sum-of-cosines rule,
   the last ``exclude_recent`` actions excluded).
3. **LLM score** ``p(a) = exp(mean token log-prob)`` of each candidate's ids plus the end-of-turn id
   (teacher forcing, temperature 1; ``Generator.score``, ``rescoring.mean_logprob``).
4. **Critic score** ``q(a) = Q_target(s, a) − V(s)`` on the state fields (ScienceWorld: task, look,
   inventory from ``env.anchor()``, ``"[OBSERVATION]: "`` + the latest observation, or
   ``"[OBSERVATION]: Start now."`` at t = 0 as in the critic data).
5. ``argmax λ_t·minmax(p) + (1 − λ_t)·minmax(q)``, ``λ_t = max(b, d^t)`` with t = the episode's turn
   index (``rescoring``); ties to the lowest index.

The chosen candidate's ids (its text + end-of-turn) go into the chat, with their teacher-forced
log-probs as behaviour log-probs. Each decision is recorded in the trajectory's
``info[DECISIONS_KEY]`` (``empo2.selectors``: candidates, p, q, λ, scores, chosen, and the LLM-only choice),
which the evaluation file lists per episode as ``decisions``. Not built:
the SwiftSage loop heuristics of docs/retrospex.md, 4. Rescoring at inference (repeat ``wait``, focus suppression, answering ``0`` to
ambiguity, early stop) — the environment adapter handles ambiguity itself.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import torch

from empo2.agent.parse import parse_action
from empo2.policy.chat import ChatFormat
from empo2.policy.generator import Generation, GenerationRequest, Generator, HFGenerator, SamplingParams
from empo2.policy.sampling import row_seed
from empo2.policy.trie import TokenTrie
from empo2.records import Trajectory, episode_id
from empo2.selectors import DECISIONS_KEY

from .config import RetrospexConfig
from .critic import Critic
from .grounding import Embed, ground_candidates
from .rescoring import choose, combined_scores, lambda_schedule, mean_logprob
from .transitions import MISSING, OBS_PREFIX, START_OBS, split_look_inventory

log = logging.getLogger(__name__)

__all__ = ["CRITIC_DIR_MISSING", "NAME", "RetrospexSelector", "build_selector", "check_critic_dir", "decision_summary"]

NAME = "retrospex"
"""The selector's registered name (``action.selector``) and the key of its section (``action.retrospex``)."""


class RetrospexSelector:
    """Chooses every live episode's action by Retrospex rescoring (``rollout.engine.ActionSelector``).

    Args:
        model: the policy (causal LM); fmt: its ``ChatFormat``.
        critic: the trained critic (``critic.load_critic``).
        cfg: the ``action.retrospex`` config section (k, d, b, temperature, exclude_recent, const_norm).
        embed: the grounding embedder (``texts -> L2-normalised [n, D]``), e.g. ``load_embedder(...).encode``.
        critic_path: where the critic was loaded from (recorded in the evaluation).
        generator: the generation backend for proposals and scores (``policy.generator``); by default
            an ``HFGenerator`` over ``model``. Each live episode's prompt cache is kept in it under the
            episode's id (``Trajectory.id``, the engine's key), retired when the episode ends (by this
            selector, or by the engine at the end of the wave when both share the generator).
    """

    name = NAME
    label = "Retrospex"
    """How ``empo2 report`` names a run whose final evaluation this selector chose the actions of."""

    def __init__(self, model: Any, fmt: ChatFormat, critic: Critic, cfg: RetrospexConfig, embed: Embed | None,
                 critic_path: str = "", generator: Generator | None = None):
        self.model = model
        self.generator: Generator = generator if generator is not None else HFGenerator(model, fmt)
        self.fmt = fmt
        self.critic = critic
        self.cfg = cfg
        self.embed = embed
        self.critic_path = critic_path
        self.end_id = min(fmt.eos_ids) if fmt.eos_ids else int(fmt.tokenizer.eos_token_id)
        self._keys: set[str] = set()  # cache keys of the episodes live at the last ``select``

    # ------------------------------------------------------------------ the engine hook
    def select(self, engine: Any, live: list[Any], admissible: list[list[str] | None], settings: Any,
               iteration: int) -> list[Generation]:
        """The chosen action of each live episode as a ``Generation`` (ids = text + end-of-turn)."""
        keys = {self._key(st, iteration) for st in live}
        self.generator.retire(sorted(self._keys - keys))  # episodes that ended: free their prompt caches
        self._keys = keys
        states = self._critic_states(engine, live)
        return [self._choose(st, adm, cs, settings, iteration) for st, adm, cs in zip(live, admissible, states)]

    def report(self, trajs: list[Trajectory]) -> dict[str, Any]:
        """The rescoring settings and ``decision_summary(trajs)``, for the evaluation record (``selector``)."""
        c = self.cfg
        return {"label": self.label, "critic": self.critic_path, "encoder": self.critic.meta.get("encoder"),
                "k": c.k, "d": c.d, "b": c.b, "temperature": c.temperature, "exclude_recent": c.exclude_recent,
                "embedder": c.embedder, **decision_summary(trajs)}

    def summary(self, result: Any) -> str:
        """The line ``empo2 eval`` prints under its table: how often the critic changed the LLM's choice (with k, d,
        b and the critic folder), and the score under the Retrospex paper's convention (a failed episode keeps its
        last non-negative score instead of 0; docs/retrospex.md, Scoring conventions), for comparison with the
        paper only.

        Args:
            result: the ``EvalResult`` (``selector`` holds ``report``'s record, ``overall.score_last_nonneg``).
        """
        r = result.selector or {}
        return (f"Retrospex (critic {self.critic_path}): the critic changed {r.get('changed', 0):.0f} of "
                f"{r.get('decisions', 0):.0f} choices (k={self.cfg.k}, d={self.cfg.d}, b={self.cfg.b}); for "
                f"comparison with the Retrospex paper only: score (0–100) with a failed episode keeping its last "
                f"non-negative score instead of 0 (the authors' convention) {result.overall.score_last_nonneg:.1f}")

    # ------------------------------------------------------------------ steps
    def _critic_states(self, engine: Any, live: list[Any]) -> list[dict[str, str]]:
        looks: list[tuple[str, str]] = [("", "")] * len(live)
        if "look" in self.critic.fields:
            # one batched call whatever the pool backend; an env error leaves the look missing (the step
            # itself will report the crash)
            anchors = engine.pool.anchor_many([st.slot for st in live])
            looks = [split_look_inventory(a) if isinstance(a, str) and a else (MISSING, MISSING) for a in anchors]
        return [{"task": st.task_description, "look": lk, "inv": inv,
                 "obs": START_OBS if st.turn == 0 else OBS_PREFIX + st.observation}
                for st, (lk, inv) in zip(live, looks)]

    @staticmethod
    def _key(st: Any, iteration: int) -> str:
        return episode_id(iteration, st.spec.task_index, st.spec.rollout)

    def _propose(self, st: Any, prompt: list[int], key: str, trie: TokenTrie | None, s: Any,
                 iteration: int) -> list[Generation]:
        """k samples from the episode's prompt: k requests with one cache key (forks of its prompt cache)."""
        k = self.cfg.k
        reqs = [GenerationRequest(prompt, seed=row_seed(s.seed, iteration, st.spec.task_index, st.spec.rollout,
                                                         st.turn, j), trie=trie, cache_key=key) for j in range(k)]
        params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=self.cfg.temperature, top_k=s.top_k)
        return self.generator.generate(reqs, params)

    def _choose(self, st: Any, admissible: list[str] | None, cstate: dict[str, str], s: Any,
                iteration: int) -> Generation:
        prompt = st.chat.prompt_ids()
        key = self._key(st, iteration)
        trie = TokenTrie.from_actions(admissible, self.fmt.encode, self.end_id) if s.action_mode == "constrained" else None
        proposals = self._propose(st, prompt, key, trie, s, iteration)
        texts = [parse_action(self.fmt.decode(g.ids), lowercase=s.lowercase_actions)[0] for g in proposals]
        recent = [x.action for x in st.steps]
        cands = ground_candidates(texts, admissible, recent, self.cfg.k, self.embed, self.cfg.exclude_recent)
        if not cands:  # nothing parsed and no admissible list: the first proposal as sampled
            return proposals[0]
        conts = [self.fmt.encode(c) + [self.end_id] for c in cands]
        lps = self.generator.score(prompt, conts, cache_key=key)
        p = [math.exp(mean_logprob(lp)) for lp in lps]
        q = [float(x) for x in self.critic.advantage([cstate] * len(cands), cands)]
        lam = lambda_schedule(st.turn, self.cfg.d, self.cfg.b)
        scores = combined_scores(torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64), lam,
                                 self.cfg.const_norm)
        i = choose(scores)
        st.info.setdefault(DECISIONS_KEY, []).append({
            "t": st.turn, "lambda": lam, "proposals": texts, "candidates": cands, "p": p, "q": q,
            "scores": [float(x) for x in scores], "chosen": i, "llm_choice": choose(p)})
        return Generation(ids=conts[i], logps=lps[i], stop="eos")


def decision_summary(trajs: list[Trajectory]) -> dict[str, float]:
    """Counts over the rescoring decisions recorded in ``traj.info[DECISIONS_KEY]``.

    Returns:
        ``decisions`` (steps rescored), ``changed`` (steps where the chosen candidate is not the
        one the LLM score alone ranks first), ``changed_frac``, ``candidates_mean``.
    """
    recs = [r for t in trajs for r in t.info.get(DECISIONS_KEY, [])]
    n = len(recs)
    changed = sum(r["chosen"] != r["llm_choice"] for r in recs)
    return {"decisions": float(n), "changed": float(changed), "changed_frac": changed / n if n else 0.0,
            "candidates_mean": sum(len(r["candidates"]) for r in recs) / n if n else 0.0}


def build_selector(setup: Any, cfg: RetrospexConfig) -> RetrospexSelector:
    """The selector factory of ``retrospex`` (``empo2.selectors.register_selector``): a ``RetrospexSelector``
    for a ``trainer.setup.Setup`` (its policy, chat format, generator and environment family) with the critic of
    ``cfg.critic_dir``.

    Args:
        setup: the evaluation setup (``build_setup``, model loaded).
        cfg: the ``action.retrospex`` config section (``critic_dir``: a folder written by ``Critic.save``).

    Raises:
        ConfigError: no ``critic_dir``, or a critic trained on another environment. CriticError: ``critic_dir`` is not
        a critic folder. EmbedderUnavailableError: the grounding embedder cannot be loaded.
    """
    from empo2.configschema import ConfigError
    from empo2.memory.embedder import load_embedder

    from .critic import load_critic

    if not cfg.critic_dir:
        raise ConfigError(CRITIC_DIR_MISSING)
    critic_dir = Path(cfg.critic_dir)
    critic = load_critic(critic_dir)
    if critic.env != setup.family.name:
        raise ConfigError(f"the critic in {critic_dir} was trained on {critic.env!r} data, but env.name is "
                          f"{setup.family.name!r}")
    embedder = load_embedder(cfg.embedder, cache_size=65536)
    return RetrospexSelector(setup.policy.model, setup.fmt, critic, cfg, embedder.encode, str(critic_dir),
                             generator=setup.generator)


CRITIC_DIR_MISSING = ("action.selector=retrospex needs its critic: set action.retrospex.critic_dir=DIR, a folder "
                      "written by `python -m experiments.retrospex critic --out DIR` (or <run>/critic of "
                      "`python -m experiments.retrospex pipeline`)")
"""The error of ``action.selector=retrospex`` without ``action.retrospex.critic_dir``."""


def check_critic_dir(cfg: Any) -> None:
    """The registered ``check`` of ``retrospex`` (``empo2.selectors.check_selector_ready``), run by
    ``empo2 eval`` / ``empo2 adapt`` before the model loads: ``action.retrospex.critic_dir`` names a critic folder
    trained on ``env.name``'s data.

    Raises:
        ConfigError: no ``critic_dir``, or a critic of another environment. CriticError: not a critic folder.
    """
    import yaml

    from empo2.configschema import ConfigError

    from .critic import META, WEIGHTS, CriticError

    section = cfg.action.retrospex
    if not section.critic_dir:
        raise ConfigError(CRITIC_DIR_MISSING)
    folder = Path(section.critic_dir)
    if not (folder / META).is_file() or not (folder / WEIGHTS).is_file():
        raise CriticError(f"action.retrospex.critic_dir={folder} is not a critic folder (no {META} / {WEIGHTS}); "
                          "train one with `python -m experiments.retrospex critic --data FILE --out DIR` or "
                          "`python -m experiments.retrospex pipeline`")
    env = (yaml.safe_load((folder / META).read_text()) or {}).get("env")
    if env is not None and env != cfg.env.name:
        raise ConfigError(f"the critic in {folder} was trained on {env!r} data, but env.name is {cfg.env.name!r}")
