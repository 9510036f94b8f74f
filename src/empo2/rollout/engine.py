"""The rollout engine: B task instances × N rollouts, every live episode's next action sampled
in one batched generation call per turn, environments stepped concurrently.

Per turn, for the live episodes of a wave (at most ``env.num_workers`` episodes at a time, one
pooled environment each):

1. an optional ``StepHook`` (EMPO² memory) retrieves tips / novelty for every live state, batched;
2. the user turn (observation + optional ``<tip>`` segment) is appended as token segments;
3. one ``Generator.generate`` call (``policy.generator``) samples the next action of every live
   episode (token ids + behaviour log-probs; in ``action.mode: constrained`` restricted by a trie
   over the admissible actions). With ``RolloutSettings.kv_cache`` (default) each request carries
   its episode's id as ``cache_key``, so the generator continues the episode's KV cache and
   prefills only the ids added since its previous turn; when the episode ends the engine retires
   the key (the cache is freed, or kept when the hook's ``keep_episode_kv`` asks: EMPO²'s tip
   writer then continues it under the same key, ``Trajectory.id``). The caches' total size is
   capped by ``kv_cache_max_bytes`` (``Generator.set_cache_budget``);
4. every episode's text goes through ``take_action`` (``rollout/action.py``) next to its environment, in
   one batched ``act_many`` call on the pool (threads here, or one remote call per Ray actor): parsed
   (``agent.parse``), sent as written, and corrected (``action.correction``) only if the
   environment *refused* it (``StepResult.refused``: nothing happened); a corrected action goes
   through the environment's ``try_step`` where it has one (ScienceWorld), so a correction never
   ends an episode. An environment's answer that asks a question (ScienceWorld's numbered
   ambiguity options) is simply the next observation, and in constrained mode its admissible list
   for that turn (the options).

An environment that raises ``EnvError`` marks its episode ``crashed`` (excluded from the update,
counted as ``rollout/env_crashes``) and is restarted; the run goes on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from empo2.records import ROLLOUT_SHOWS_TIPS
from empo2.agent.prompts import EpisodeChat, first_user_text, later_user_text, tip_block
from empo2.envs.base import EnvFamily, TaskSpec, failure_rule
from empo2.policy.chat import ChatFormat
from empo2.rollout.action import ActionOutcome, take_action  # noqa: F401  (re-exported: the action pipeline)
from empo2.policy.generator import Generation, GenerationRequest, Generator, HFGenerator, SamplingParams
from empo2.policy.sampling import row_seed
from empo2.policy.trie import TokenTrie
from empo2.records import Mode, StepRecord, Trajectory, episode_id
from empo2.rollout.pool import EnvPoolBase

log = logging.getLogger(__name__)


@dataclass
class EpisodeSpec:
    """One episode to run: its task instance, deterministic ids, group and mode."""

    task: TaskSpec
    task_index: int
    rollout: int
    group: int
    mode: Mode = Mode.PLAIN


@dataclass
class EpisodeState:
    """A live episode during a rollout (hooks read it; the engine owns it).

    Attributes:
        spec: what is being run.
        chat: the chat so far (token segments + plain messages).
        observation: the latest observation text (not yet shown to the model when ``pending``).
        task_description: the task text.
        score, initial_score: current/initial score (0..100).
        steps: finished turn records.
        finished, done, success, crashed: episode status.
        tips: tips the hook chose for the coming turn.
        intrinsic: r_int the hook computed for the coming turn's state.
        slot: index of the pooled environment.
    """

    spec: EpisodeSpec
    chat: EpisodeChat
    observation: str
    task_description: str
    slot: int
    score: float = 0.0
    initial_score: float = 0.0
    steps: list[StepRecord] = field(default_factory=list)
    finished: bool = False
    done: bool = False
    success: bool = False
    crashed: bool = False
    tips: list[str] = field(default_factory=list)
    intrinsic: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def turn(self) -> int:
        return len(self.steps)


class StepHook:
    """What the engine calls during a rollout; every hook has these three methods (no-op defaults).

    ``before_turn`` runs once per turn with every live episode, before the user turn is built:
    implementations set ``state.tips`` (texts to show where ``ROLLOUT_SHOWS_TIPS[mode]``) and
    ``state.intrinsic`` for each state (EMPO²'s runtime retrieves from its memory). With KV reuse on,
    ``keep_episode_kv`` is asked about every episode that ended: True keeps its cache in the
    generator under the episode's id (``Trajectory.id``) for a later request (the tip writer), within
    ``kv_cache_max_bytes``; it must depend on the state only (it may be asked more than once).
    ``after_wave`` runs when a wave of episodes has ended (their kept caches can be continued then;
    its time counts as ``timings["tips"]``). The training method (``methods.base.Method``) is one.
    """

    def before_turn(self, states: list[EpisodeState]) -> None:
        """Set ``tips`` / ``intrinsic`` of each live episode's coming turn (default: nothing)."""

    def keep_episode_kv(self, state: EpisodeState) -> bool:
        """Keep the ended episode's KV cache for a hand-over (default: no)."""
        return False

    def after_wave(self, trajectories: list[Trajectory]) -> None:
        """A wave of episodes ended (default: nothing)."""


NO_HOOK = StepHook()
"""The hook of a rollout that needs none (plain GRPO rollouts, evaluation)."""


class ActionSelector(Protocol):
    """Chooses the next action of every live episode instead of the engine's single sample.

    Chosen by ``action.selector`` and built by ``selectors.make_selector`` (a registry: a plug-in's
    selector, e.g. ``experiments/retrospex``'s rescoring of several proposals by an offline critic; the built-in
    ``policy`` is none). ``select`` gets the live episodes (their user turn already appended) and their
    admissible actions (always fetched when a selector is given), and returns one ``Generation`` per episode
    whose ids are appended to the chat as the action segment; the engine then parses, corrects and steps them
    as usual. What else a selector may provide (a report, a summary line, per-step decisions) is in
    ``selectors``.
    """

    def select(self, engine: RolloutEngine, live: list[EpisodeState], admissible: list[list[str] | None],
               settings: RolloutSettings, iteration: int) -> list[Generation]: ...


@dataclass
class RolloutSettings:
    """Knobs of one ``run`` call (from the config, resolved by the trainer)."""

    temperature: float
    max_new_tokens: int
    max_turns: int
    action_mode: str = "free"  # "free" | "constrained"
    correction: str = "safe"  # an ``empo2.corrections`` name: "none" | "exact" | "safe" | a plug-in's
    max_context: int = 4096
    max_tip_tokens: int = 512
    generation_batch_size: int = 0
    top_k: int = 0
    seed: int = 0
    few_shot: bool = True
    need_anchor: bool = False
    lowercase_actions: bool = True
    kv_cache: bool = True
    """Keep each episode's KV cache between turns and prefill only its new ids (same samples and
    log-probs as re-prefilling, up to float rounding; falls back to re-prefill for models whose cache
    cannot be sliced)."""
    autocast: str = "none"
    """``model.autocast``: sample under ``torch.autocast`` in this dtype (``policy.precision``)."""
    kv_cache_max_bytes: int = 2 * 1024 ** 3
    """``rollout.kv_cache_max_bytes``: cap on the bytes of all kept episode caches (0 = no cap),
    handed to ``Generator.set_cache_budget``. Episodes past the cap (in live order) are re-prefilled
    each turn instead. SmolLM2-135M fp32 uses 46 KiB per cached token (30 layers × 2 × 3 KV heads ×
    64 × 4 B), so 2 GiB ≈ 45k tokens. Before each generation call the caches kept for finished
    episodes are trimmed so that they, the live caches and the call's growth fit the cap; the batch
    cache of one call holds the live caches (moved, not copied) plus padding."""
    plugins: tuple[str, ...] = ()
    """Plug-in modules ``take_action`` imports first where it runs (a Ray environment actor): the one that
    registered ``correction`` (``corrections.correction_plugin``)."""


class RolloutEngine:
    """Runs episodes with a policy on a pool of environments.

    Args:
        model: the causal LM used for sampling.
        fmt: its ``ChatFormat``.
        family: the environment family (system prompt, few-shot turns, and which episodes failed:
            ``Trajectory.failed`` by its ``envs.base.failure_rule``).
        pool: the environment pool (thread or Ray backend; one batched call per turn and method).
        generator: the generation backend (``policy.generator``); by default an ``HFGenerator`` over
            ``model``. Shared with EMPO²'s tip writer, which continues the caches this engine keeps.
    """

    def __init__(self, model: Any, fmt: ChatFormat, family: EnvFamily, pool: EnvPoolBase,
                 generator: Generator | None = None):
        self.model = model
        self.fmt = fmt
        self.family = family
        self.failure = failure_rule(family)
        self.pool = pool
        self.generator: Generator = generator if generator is not None else HFGenerator(model, fmt)
        self.end_id = min(fmt.eos_ids) if fmt.eos_ids else int(fmt.tokenizer.eos_token_id)
        self.timings: dict[str, float] = {}
        # episodes of the current wave whose requests carried a cache key, until the engine retires them
        self._open: dict[str, EpisodeState] = {}
        self._keep_kv: Callable[[EpisodeState], bool] | None = None
        self._warned_first_prompt = False  # episodes cut before their first action: said once per engine
        self._warned_tips_cut = False  # episodes shown tips cut short by the context: said once per engine

    # ------------------------------------------------------------------ public
    def first_prompt_tokens(self, task: TaskSpec, settings: RolloutSettings) -> int | None:
        """Tokens of the prompt of an episode of ``task`` at its first turn, without tips: the system prompt,
        the few-shot turns (``settings.few_shot``), the task and the first observation. Resets pool slot 0 to
        ``task`` (every rollout resets its slots anyway). None when that reset fails (the slot is restarted;
        the rollout handles a broken environment as usual)."""
        obs = self.pool.reset_many([0], [task])[0]
        if isinstance(obs, Exception):
            log.debug("first prompt of %s not measured: the reset failed (%s)", task, obs)
            self.pool.restart(0)
            return None
        chat = EpisodeChat(self.fmt, self.family.system_prompt(), self.family.few_shot() if settings.few_shot else [])
        chat.add_user(first_user_text(obs.task_description, obs.text), 0)
        return len(chat)

    def run(self, episodes: list[EpisodeSpec], settings: RolloutSettings, iteration: int = 0,
            hook: StepHook | None = None, on_turn: Callable[[int], None] | None = None,
            selector: ActionSelector | None = None) -> list[Trajectory]:
        """Run every episode to its end; return one ``Trajectory`` per episode, in input order.

        ``on_turn(n_actions)`` is called after every batched turn (progress display). With a
        ``selector`` the actions come from ``selector.select`` instead of one sample per episode.
        """
        self.timings = {"generation": 0.0, "env": 0.0, "hook": 0.0, "tips": 0.0}
        ids = [(e.task_index, e.rollout) for e in episodes]
        if len(set(ids)) != len(ids):
            raise ValueError("two episodes with the same (task_index, rollout): episode ids (and their seeds and "
                             "cache keys) must be unique within a run")
        self.generator.set_cache_budget(settings.kv_cache_max_bytes)
        self.generator.release()
        hook = hook if hook is not None else NO_HOOK
        self._keep_kv = hook.keep_episode_kv if settings.kv_cache else None
        out: list[Trajectory] = []
        try:
            for w in range(0, len(episodes), self.pool.size):
                wave = episodes[w:w + self.pool.size]
                trajs = self._run_wave(wave, settings, iteration, hook, on_turn, selector)
                t0 = time.perf_counter()  # e.g. tips from the wave's kept caches, before the next wave
                hook.after_wave(trajs)
                self.timings["tips"] += time.perf_counter() - t0
                out.extend(trajs)
        except BaseException:
            self.generator.reset_cache()
            raise
        finally:
            self._keep_kv = None
            self._open.clear()
        self._warn_cut_at_first_turn(out, settings)
        self._warn_tips_cut(out, settings)
        return out

    def _warn_cut_at_first_turn(self, trajs: list[Trajectory], s: RolloutSettings) -> None:
        """Say once (per engine) when episodes ended before their first action because their first prompt does
        not fit ``model.max_context``: such episodes take no step, score their start and teach nothing, and only
        ``rollout/context_full`` would show it."""
        cut = [t for t in trajs if t.info.get("context_full") and t.num_steps == 0 and not t.crashed]
        if not cut or self._warned_first_prompt:
            return
        self._warned_first_prompt = True
        need = max(int(t.info.get("context_need", 0)) for t in cut)
        shorter = "action.few_shot=false, fewer or shorter tips" if s.few_shot else "fewer or shorter tips"
        log.warning("%d of %d episodes stopped before their first action: their first prompt and "
                    "action.max_new_tokens (%d) need up to %d tokens, more than model.max_context (%d), so they take "
                    "no step and teach nothing (counted in rollout/context_full); raise model.max_context to at "
                    "least %d, or shorten the prompt (%s)", len(cut), len(trajs), s.max_new_tokens, need,
                    s.max_context, need, shorter)

    def _warn_tips_cut(self, trajs: list[Trajectory], s: RolloutSettings) -> None:
        """Say once (per engine) when episodes shown tips ended at ``model.max_context`` after some turns.

        Every turn keeps its tip block in the chat (docs/architecture.md, the token contract), so with
        ``max_turns`` turns a tipped episode needs about ``max_turns`` × (observation + tip block) tokens; past
        the context it ends early and has fewer turns to find anything than a plain episode. Only
        ``rollout/context_full`` and ``rollout/steps_mean/<mode>`` would show it."""
        if self._warned_tips_cut:
            return
        tipped = [t for t in trajs if ROLLOUT_SHOWS_TIPS[t.mode] and not t.crashed]
        cut = [t for t in tipped if t.info.get("context_full") and t.num_steps > 0]
        if not cut:
            return
        self._warned_tips_cut = True
        plain = [t for t in trajs if not ROLLOUT_SHOWS_TIPS[t.mode] and not t.crashed]
        plain_cut = sum(bool(t.info.get("context_full")) for t in plain)
        turns = sum(t.num_steps for t in cut) / len(cut)
        log.warning("%d of %d episodes shown tips ended at model.max_context (%d) after %.1f turns on average "
                    "(rollout turn cap %d; episodes without tips: %d of %d ended there): every turn keeps its tip "
                    "block in the chat, so tips cost turns (rollout/steps_mean/<mode>). Raise model.max_context, or "
                    "show less per turn: empo2.memory.top_k, empo2.memory.max_tip_tokens (now %d), "
                    "empo2.memory.entry_text=per_episode", len(cut), len(tipped), s.max_context, turns,
                    s.max_turns, plain_cut, len(plain), s.max_tip_tokens)

    # ------------------------------------------------------------------ internals
    def _crash(self, st: EpisodeState, err: Exception) -> None:
        log.warning("environment crashed in %s: %s; episode excluded, env restarted", st.spec.task, err)
        st.crashed = st.finished = True
        st.info["crash"] = str(err)
        self.pool.restart(st.slot)

    def _run_wave(self, wave: list[EpisodeSpec], s: RolloutSettings, iteration: int,
                  hook: StepHook, on_turn: Callable[[int], None] | None,
                  selector: ActionSelector | None = None) -> list[Trajectory]:
        """Play one wave (at most ``pool.size`` episodes, one env slot each) to its end, turn by turn in a batch;
        returns its trajectories in wave order and retires the wave's caches."""
        states = self._reset_wave(wave, s)
        for _turn in range(s.max_turns):
            live = [st for st in states if not st.finished]
            if not live:
                break
            t0 = time.perf_counter()
            hook.before_turn(live)
            self.timings["hook"] += time.perf_counter() - t0
            anchors = self._turn_anchors(live, s)
            self._add_user_turns(live, s)
            live = [st for st in live if self._fits(st, s)]
            if not live:
                break
            live, admissible = self._admissible_actions(live, s, selector)
            if not live:
                break
            if selector is not None:
                t0 = time.perf_counter()
                gens = selector.select(self, live, admissible, s, iteration)
                self.timings["generation"] += time.perf_counter() - t0
            else:
                gens = self._generate(live, admissible, s, iteration)
            self._act_and_record(live, gens, s, anchors)
            if on_turn is not None:
                on_turn(len(live))
        return self._finish_wave(states, iteration)

    def _reset_wave(self, wave: list[EpisodeSpec], s: RolloutSettings) -> list[EpisodeState]:
        """Reset one env slot per episode of ``wave`` and start each episode's chat; a failed reset is a crash."""
        few = self.family.few_shot() if s.few_shot else []
        system = self.family.system_prompt()
        t0 = time.perf_counter()
        resets = self.pool.reset_many(list(range(len(wave))), [e.task for e in wave])
        self.timings["env"] += time.perf_counter() - t0
        states: list[EpisodeState] = []
        for slot, (spec, obs) in enumerate(zip(wave, resets)):
            chat = EpisodeChat(self.fmt, system, few)
            if isinstance(obs, Exception):
                st = EpisodeState(spec, chat, "", "", slot)
                self._crash(st, obs)
            else:
                st = EpisodeState(spec, chat, obs.text, obs.task_description, slot, obs.score, obs.score)
            states.append(st)
        return states

    def _turn_anchors(self, live: list[EpisodeState], s: RolloutSettings) -> dict[int, str]:
        """The anchor state key of each live episode (keyed by ``id(state)``) when the estimator needs one, else {}."""
        anchors: dict[int, str] = {}
        if s.need_anchor:
            res = self.pool.anchor_many([st.slot for st in live])
            anchors = {id(st): a if isinstance(a, str) else "" for st, a in zip(live, res)}
        return anchors

    def _add_user_turns(self, live: list[EpisodeState], s: RolloutSettings) -> None:
        """Add each live episode's user turn: the observation and (in a tip-showing mode) the tips that fit."""
        for st in live:
            text = (first_user_text(st.task_description, st.observation) if st.turn == 0
                    else later_user_text(st.observation))
            tips = st.tips if ROLLOUT_SHOWS_TIPS[st.spec.mode] else []
            tip_ids, kept = self._budget_tips(tips, len(st.chat), s)
            st.info.setdefault("shown_tips", []).append(kept)
            st.info.setdefault("tips_truncated", []).append(len(kept) < len(tips))
            st.chat.add_user(text, st.turn, tip_ids=tip_ids)

    def _admissible_actions(self, live: list[EpisodeState], s: RolloutSettings, selector: ActionSelector | None
                            ) -> tuple[list[EpisodeState], list[list[str] | None]]:
        """The admissible actions of each live episode (queried for constrained actions or a selector, else None);
        returns the episodes still live after a failed query crashed some, with their admissible actions."""
        admissible: list[list[str] | None] = [None] * len(live)
        if s.action_mode == "constrained" or selector is not None:
            t0 = time.perf_counter()
            res = self.pool.admissible_many([st.slot for st in live])
            self.timings["env"] += time.perf_counter() - t0
            for i, (st, r) in enumerate(zip(live, res)):
                if isinstance(r, Exception):
                    self._crash(st, r)
                else:
                    admissible[i] = r
        idx = [i for i, st in enumerate(live) if not st.finished]
        return [live[i] for i in idx], [admissible[i] for i in idx]

    def _act_and_record(self, live: list[EpisodeState], gens: list[Generation], s: RolloutSettings,
                        anchors: dict[int, str]) -> None:
        """Add each generation to its chat, act in the envs, and record a ``StepRecord`` per episode (or a crash)."""
        raws: list[str] = []
        for st, g in zip(live, gens):
            raw = self.fmt.decode(g.ids)
            st.chat.add_action(g, raw.strip(), st.turn)
            raws.append(raw)
        t0 = time.perf_counter()
        outcomes = self.pool.act_many([st.slot for st in live], raws, s)
        self.timings["env"] += time.perf_counter() - t0
        for st, raw, out in zip(live, raws, outcomes):
            if isinstance(out, Exception):
                self._crash(st, out)
                continue
            r = out.result
            st.steps.append(StepRecord(
                index=st.turn, observation=st.observation, raw_text=raw, action=out.action,
                parsed_ok=out.parsed_ok, corrected=out.corrected, env_valid=r.valid, reward=r.reward,
                score=r.score, tips=list(st.info["shown_tips"][-1]), intrinsic=st.intrinsic,
                anchor=anchors.get(id(st), ""), truncated_tips=st.info["tips_truncated"][-1]))
            st.observation, st.score = r.observation, r.score
            if r.done:
                st.done = st.finished = True
                st.success = r.success

    def _finish_wave(self, states: list[EpisodeState], iteration: int) -> list[Trajectory]:
        """The wave's trajectories; its caches are kept for a hand-over (``keep_episode_kv``) or freed."""
        trajs = [self._trajectory(st, iteration) for st in states]
        # the wave's caches, in episode order: kept for a hand-over under ``Trajectory.id``, or freed
        keys = [episode_id(iteration, st.spec.task_index, st.spec.rollout) for st in states]
        # (those retired mid-wave with a kept cache move to the end in this order, unknown keys are ignored)
        self.generator.retire(keys, [self._keeps(st) for st in states])
        self._open.clear()
        return trajs

    def _keeps(self, st: EpisodeState) -> bool:
        """Whether the hook keeps ``st``'s cache after the episode ended (``keep_episode_kv``)."""
        return self._keep_kv is not None and self._keep_kv(st)

    def _budget_tips(self, tips: list[str], prompt_len: int, s: RolloutSettings) -> tuple[list[int], list[str]]:
        """Ids of the tip block with as many tips as fit ``max_tip_tokens`` and the context."""
        kept = list(tips)
        room = min(s.max_tip_tokens, s.max_context - prompt_len - s.max_new_tokens - 256)
        while kept:
            ids = self.fmt.encode(tip_block(kept))
            if len(ids) <= room:
                return ids, kept
            kept.pop()
        return [], []

    def _fits(self, st: EpisodeState, s: RolloutSettings) -> bool:
        if len(st.chat) + s.max_new_tokens <= s.max_context:
            return True
        st.finished = True
        st.info["context_full"] = True
        st.info["context_need"] = len(st.chat) + s.max_new_tokens  # the tokens this turn would have needed
        st.chat.drop_open_turn(st.turn)  # the user turn we just added has no action
        return False

    def _generate(self, live: list[EpisodeState], admissible: list[list[str] | None], s: RolloutSettings,
                  iteration: int) -> list[Generation]:
        """One ``Generator.generate`` call for the live episodes' next actions (one request each)."""
        t0 = time.perf_counter()
        keys = [episode_id(iteration, st.spec.task_index, st.spec.rollout) for st in live]
        if s.kv_cache:
            alive = set(keys)  # episodes that ended since the last turn give up (or keep) their cache
            gone = [k for k in self._open if k not in alive]
            self.generator.retire(gone, [self._keeps(self._open.pop(k)) for k in gone])
            self._open.update(zip(keys, live))
        reqs = [GenerationRequest(
            st.chat.prompt_ids(), seed=row_seed(s.seed, iteration, st.spec.task_index, st.spec.rollout, st.turn),
            trie=TokenTrie.from_actions(adm, self.fmt.encode, self.end_id) if s.action_mode == "constrained" else None,
            cache_key=key if s.kv_cache else None) for st, adm, key in zip(live, admissible, keys)]
        params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_k=s.top_k,
                                autocast=s.autocast, max_batch_rows=s.generation_batch_size)
        out = self.generator.generate(reqs, params)
        self.timings["generation"] += time.perf_counter() - t0
        return out

    def _trajectory(self, st: EpisodeState, iteration: int) -> Trajectory:
        sp = st.spec
        return Trajectory(
            iteration=iteration, task_index=sp.task_index, rollout=sp.rollout, task=sp.task, group=sp.group,
            mode=sp.mode, segments=st.chat.segments, steps=st.steps, initial_score=st.initial_score,
            final_score=st.score, done=st.done, success=st.success, crashed=st.crashed,
            failed=not st.crashed and self.failure.failed(st.score, st.success),
            final_observation="" if st.crashed else st.observation,
            info={k: v for k, v in st.info.items() if k not in ("shown_tips",)} | {"messages": st.chat.messages,
                                                                                   "task_description": st.task_description})
