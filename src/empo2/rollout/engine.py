"""The rollout engine: B task instances × N rollouts, every live episode's next action sampled
in one batched generation call per turn, environments stepped concurrently.

Per turn, for the live episodes of a wave (at most ``env.num_workers`` episodes at a time, one
pooled environment each):

1. an optional ``StepHook`` (EMPO² memory) retrieves tips / novelty for every live state, batched;
2. the user turn (observation + optional ``<tip>`` segment) is appended as token segments;
3. one ``sample`` call generates the next action of every live episode (token ids + behaviour
   log-probs; in ``action.mode: constrained`` restricted by a trie over the admissible actions).
   With ``RolloutSettings.kv_cache`` (default) each episode keeps its KV cache between turns
   (``policy.kvcache``) and ``sample_with_cache`` prefills only the ids added since its previous
   turn; the caches are dropped when the episode ends. Their total size is capped by
   ``kv_cache_max_bytes``: episodes past the cap keep no cache and are re-prefilled each turn.
   Models without a sliceable cache (fakes, sliding-window models) fall back to ``sample``.
   A hook with ``keep_episode_kv`` (EMPO²'s tip writer) may ask to keep a finished episode's
   cache past its end: ``take_episode_kv(trajectory)`` then hands it over (it covers a prefix of
   ``trajectory.token_ids()``), so a prompt that continues the trajectory only prefills its suffix;
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
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from empo2.agent.prompts import EpisodeChat, first_user_text, later_user_text, tip_block
from empo2.envs.base import EnvFamily, TaskSpec
from empo2.policy.chat import ChatFormat
from empo2.rollout.action import ActionOutcome, take_action  # noqa: F401  (re-exported: the action pipeline)
from empo2.policy.kvcache import EpisodeKV, KVCacheUnsupported, kv_bytes_per_token
from empo2.policy.precision import autocast, model_device
from empo2.policy.sampling import Generation, row_generator, sample, sample_with_cache
from empo2.policy.trie import TokenTrie
from empo2.records import Mode, StepRecord, Trajectory
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


class StepHook(Protocol):
    """Called once per turn with every live episode, before the user turn is built.

    Implementations set ``state.tips`` (texts to show; ignored for ``Mode.PLAIN``) and
    ``state.intrinsic`` for each state. EMPO²'s memory implements it (``memory/``).

    Optionally a hook also defines ``keep_episode_kv(state: EpisodeState) -> bool``, asked (with
    KV reuse on) about episodes that finished with a cache; True keeps that cache after the
    episode ends, for ``RolloutEngine.take_episode_kv`` (within ``kv_cache_max_bytes``). It must
    depend on the state only (it may be asked more than once).
    """

    def before_turn(self, states: list[EpisodeState]) -> None: ...

    # Optionally also ``after_wave(trajectories: list[Trajectory]) -> None``, called when a wave of
    # episodes has ended (their kept caches can be taken then; time counted as ``timings["tips"]``).


class ActionSelector(Protocol):
    """Chooses the next action of every live episode instead of the engine's single sample.

    Retrospex's rescoring (``empo2.retrospex.selector``) implements it: several proposals, grounding,
    LLM and critic scores. ``select`` gets the live episodes (their user turn already appended) and
    their admissible actions (always fetched when a selector is given), and returns one
    ``Generation`` per episode whose ids are appended to the chat as the action segment; the engine
    then parses, corrects and steps them as usual.
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
    correction: str = "safe"  # "none" | "exact" | "safe"
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
    """Cap on the bytes of all kept episode caches (0 = no cap). Episodes past the cap (in live
    order) are re-prefilled each turn instead. SmolLM2-135M fp32 uses 46 KiB per cached token
    (30 layers × 2 × 3 KV heads × 64 × 4 B), so 2 GiB ≈ 45k tokens. Before each generation call the
    caches kept for finished episodes are trimmed so that they, the live caches and the call's growth
    fit the cap; the batch cache of one call holds the live caches (moved, not copied) plus padding."""


class RolloutEngine:
    """Runs episodes with a policy on a pool of environments.

    Args:
        model: the causal LM used for sampling.
        fmt: its ``ChatFormat``.
        family: the environment family (system prompt, few-shot turns).
        pool: the environment pool (thread or Ray backend; one batched call per turn and method).
    """

    def __init__(self, model: Any, fmt: ChatFormat, family: EnvFamily, pool: EnvPoolBase):
        self.model = model
        self.fmt = fmt
        self.family = family
        self.pool = pool
        self.end_id = min(fmt.eos_ids) if fmt.eos_ids else int(fmt.tokenizer.eos_token_id)
        self.timings: dict[str, float] = {}
        # per live episode (keyed by id(state), weakly tied to the state): its KV cache
        self._kv: dict[int, tuple[weakref.ref, EpisodeKV]] = {}
        self._kv_supported = True
        # finished episodes of the current wave whose cache the hook keeps (keyed by id(state))
        self._kv_done: dict[int, tuple[weakref.ref, EpisodeKV]] = {}
        # kept caches of finished episodes, keyed by id(trajectory), until ``take_episode_kv``
        self._kv_kept: dict[int, tuple[weakref.ref, EpisodeKV]] = {}
        self._keep_kv: Callable[[EpisodeState], bool] | None = None
        self._bpt: int | None = None  # KV bytes per token of the model (0: unknown)

    # ------------------------------------------------------------------ public
    def run(self, episodes: list[EpisodeSpec], settings: RolloutSettings, iteration: int = 0,
            hook: StepHook | None = None, on_turn: Callable[[int], None] | None = None,
            selector: ActionSelector | None = None) -> list[Trajectory]:
        """Run every episode to its end; return one ``Trajectory`` per episode, in input order.

        ``on_turn(n_actions)`` is called after every batched turn (progress display). With a
        ``selector`` the actions come from ``selector.select`` instead of one sample per episode.
        """
        self.timings = {"generation": 0.0, "env": 0.0, "hook": 0.0, "tips": 0.0}
        self.drop_episode_kvs()
        keep = getattr(hook, "keep_episode_kv", None) if settings.kv_cache else None
        self._keep_kv = keep if callable(keep) else None
        out: list[Trajectory] = []
        try:
            after_wave = getattr(hook, "after_wave", None)
            for w in range(0, len(episodes), self.pool.size):
                wave = episodes[w:w + self.pool.size]
                trajs = self._run_wave(wave, settings, iteration, hook, on_turn, selector)
                if callable(after_wave):  # e.g. tips from the wave's kept caches, before the next wave
                    t0 = time.perf_counter()
                    after_wave(trajs)
                    self.timings["tips"] += time.perf_counter() - t0
                out.extend(trajs)
        except BaseException:
            self.drop_episode_kvs()
            raise
        finally:
            self._keep_kv = None
            self._kv_done.clear()
        return out

    def take_episode_kv(self, traj: Trajectory) -> EpisodeKV | None:
        """Hand over the kept KV cache of a finished episode of the last ``run`` (once), or None.

        Only episodes for which the hook's ``keep_episode_kv`` returned True have one, and only if
        KV reuse was on, the model supports it and the cache fit ``kv_cache_max_bytes``. The
        cache's ``ids`` are a prefix of ``traj.token_ids(with_tips=True)`` (the episode's last
        prompt plus the action ids that were fed); callers still ``sync`` it against their prompt
        (``sample_with_cache`` does). It was computed with the weights of the rollout: use it
        before the policy is updated.
        """
        entry = self._kv_kept.pop(id(traj), None)
        if entry is None or entry[0]() is not traj:
            return None
        return entry[1]

    def drop_episode_kvs(self) -> None:
        """Release every kept cache of finished episodes (the next ``run`` does it too)."""
        for table in (self._kv_done, self._kv_kept):
            for _, e in table.values():
                e.clear()
            table.clear()

    # ------------------------------------------------------------------ internals
    def _crash(self, st: EpisodeState, err: Exception) -> None:
        log.warning("environment crashed in %s: %s; episode excluded, env restarted", st.spec.task, err)
        st.crashed = st.finished = True
        st.info["crash"] = str(err)
        self.pool.restart(st.slot)

    def _run_wave(self, wave: list[EpisodeSpec], s: RolloutSettings, iteration: int,
                  hook: StepHook | None, on_turn: Callable[[int], None] | None,
                  selector: ActionSelector | None = None) -> list[Trajectory]:
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

        for _turn in range(s.max_turns):
            live = [st for st in states if not st.finished]
            if not live:
                break
            if hook is not None:
                t0 = time.perf_counter()
                hook.before_turn(live)
                self.timings["hook"] += time.perf_counter() - t0
            anchors: dict[int, str] = {}
            if s.need_anchor:
                res = self.pool.anchor_many([st.slot for st in live])
                anchors = {id(st): a if isinstance(a, str) else "" for st, a in zip(live, res)}
            for st in live:
                text = (first_user_text(st.task_description, st.observation) if st.turn == 0
                        else later_user_text(st.observation))
                tips = st.tips if st.spec.mode is not Mode.PLAIN else []
                tip_ids, kept = self._budget_tips(tips, len(st.chat), s)
                st.info.setdefault("shown_tips", []).append(kept)
                st.info.setdefault("tips_truncated", []).append(len(kept) < len(tips))
                st.chat.add_user(text, st.turn, tip_ids=tip_ids)
            live = [st for st in live if self._fits(st, s)]
            if not live:
                break
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
            live = [live[i] for i in idx]
            admissible = [admissible[i] for i in idx]
            if not live:
                break
            if selector is not None:
                t0 = time.perf_counter()
                gens = selector.select(self, live, admissible, s, iteration)
                self.timings["generation"] += time.perf_counter() - t0
            else:
                gens = self._generate(live, admissible, s, iteration)
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
            if on_turn is not None:
                on_turn(len(live))
        trajs = [self._trajectory(st, iteration) for st in states]
        for st, t in zip(states, trajs):
            self._hand_over_kv(st, t)
        return trajs

    def _hand_over_kv(self, st: EpisodeState, traj: Trajectory) -> None:
        """At the end of a wave: keep ``st``'s cache for ``take_episode_kv(traj)`` or drop it."""
        entry = self._kv_done.pop(id(st), None) or self._kv.pop(id(st), None)
        if entry is None or entry[0]() is not st:
            return
        ekv = entry[1]
        if ekv.length and self._keep_kv is not None and self._keep_kv(st):
            self._kv_kept[id(traj)] = (weakref.ref(traj), ekv)
        else:
            ekv.clear()

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
        # the user turn we just added has no action: drop it from the stored chat
        while st.chat.segments and st.chat.segments[-1].step == st.turn:
            seg = st.chat.segments.pop()
            del st.chat._ids[len(st.chat._ids) - len(seg.ids):]
        return False

    def _generate(self, live: list[EpisodeState], admissible: list[list[str] | None], s: RolloutSettings,
                  iteration: int) -> list[Generation]:
        t0 = time.perf_counter()
        tries: list[TokenTrie | None] | None = None
        if s.action_mode == "constrained":
            tries = []
            for adm in admissible:
                seqs = [self.fmt.encode(a) for a in (adm or [])]
                tries.append(TokenTrie(seqs, self.end_id) if any(seqs) else None)
        prompts = [st.chat.prompt_ids() for st in live]
        bs = s.generation_batch_size or len(live)
        kw = dict(max_new_tokens=s.max_new_tokens, temperature=s.temperature, eos_ids=self.fmt.eos_ids,
                  newline_ids=self.fmt.newline_ids, stop_at_newline=True,
                  pad_id=int(self.fmt.tokenizer.pad_token_id or 0), top_k=s.top_k)
        out: list[Generation] | None = None
        with autocast(model_device(self.model), s.autocast):
            if s.kv_cache and self._kv_supported:
                out = self._generate_cached(live, prompts, tries, bs, kw, s, iteration)
            if out is None:
                self._kv.clear()
                gens_ = self._row_generators(live, s, iteration)
                out = []
                for b in range(0, len(live), bs):
                    out.extend(sample(self.model, prompts[b:b + bs], generators=gens_[b:b + bs],
                                      tries=tries[b:b + bs] if tries is not None else None, **kw))
        self.timings["generation"] += time.perf_counter() - t0
        return out

    @staticmethod
    def _row_generators(live: list[EpisodeState], s: RolloutSettings, iteration: int) -> list[Any]:
        return [row_generator(s.seed, iteration, st.spec.task_index, st.spec.rollout, st.turn) for st in live]

    def _generate_cached(self, live: list[EpisodeState], prompts: list[list[int]],
                         tries: list[TokenTrie | None] | None, bs: int, kw: dict[str, Any], s: RolloutSettings,
                         iteration: int) -> list[Generation] | None:
        """``sample_with_cache`` over the live episodes' kept caches; None if the model cannot."""
        keep = {id(st) for st in live}
        for k in list(self._kv.keys()):  # episodes that ended since the last turn
            if k not in keep:
                ref, ekv = self._kv.pop(k)
                st_done = ref()
                if st_done is not None and ekv.length and self._keep_kv is not None and self._keep_kv(st_done):
                    self._kv_done[k] = (ref, ekv)
                else:
                    ekv.clear()
        ekvs = [self._episode_kv(st) for st in live]
        self._make_room(ekvs, prompts, s)
        gens_ = self._row_generators(live, s, iteration)
        out: list[Generation] = []
        try:
            for b in range(0, len(live), bs):
                out.extend(sample_with_cache(self.model, ekvs[b:b + bs], prompts[b:b + bs], generators=gens_[b:b + bs],
                                             tries=tries[b:b + bs] if tries is not None else None, **kw))
        except KVCacheUnsupported as e:  # raised by the first prefill, before any sampling
            log.info("KV cache reuse unavailable for this model (%s); re-prefilling every turn", e)
            self._kv_supported = False
            return None
        self._cap_kv(ekvs, s.kv_cache_max_bytes)
        return out

    def _episode_kv(self, st: EpisodeState) -> EpisodeKV:
        """The kept cache of ``st`` (a new empty one the first time); freed when ``st`` is collected."""
        key = id(st)
        entry = self._kv.get(key)
        if entry is not None and entry[0]() is st:
            return entry[1]
        table = self._kv

        def _gone(ref: weakref.ref, key: int = key, table: dict = table) -> None:
            e = table.get(key)
            if e is not None and e[0] is ref:
                del table[key]

        ekv = EpisodeKV()
        self._kv[key] = (weakref.ref(st, _gone), ekv)
        return ekv

    def _make_room(self, ekvs: list[EpisodeKV], prompts: list[list[int]], s: RolloutSettings) -> None:
        """Before a generation call, drop kept caches of finished episodes (lowest priority last-kept
        first) until they, the live caches and what this call adds to the live ones (new prompt ids and
        ``max_new_tokens`` per row) fit ``kv_cache_max_bytes``: the cap then holds during the call, not
        only after it (without this, a new wave's caches grew on top of a full budget of kept ones)."""
        if s.kv_cache_max_bytes <= 0 or not (self._kv_kept or self._kv_done):
            return
        if self._bpt is None:
            self._bpt = kv_bytes_per_token(self.model) or 0
        if not self._bpt:
            return
        live = sum(e.nbytes + (len(p) - min(e.length, len(p) - 1) + s.max_new_tokens) * self._bpt
                   for e, p in zip(ekvs, prompts))
        kept = [(table, k) for table in (self._kv_kept, self._kv_done) for k in table]
        total = live + sum(table[k][1].nbytes for table, k in kept)
        for table, k in reversed(kept):
            if total <= s.kv_cache_max_bytes:
                break
            total -= table[k][1].nbytes
            table[k][1].clear()
            del table[k]

    def _cap_kv(self, ekvs: list[EpisodeKV], max_bytes: int) -> None:
        """Keep live caches in live order while their total fits ``max_bytes``; clear the rest.

        Kept caches of finished episodes (``keep_episode_kv``) share the budget with lower
        priority: after the live ones, they are kept in the order the episodes finished while
        the total fits, and the others are dropped.
        """
        if max_bytes <= 0:
            return
        total = 0
        for e in ekvs:
            total += e.nbytes
            if total > max_bytes:
                total -= e.nbytes
                e.clear()
        for table in (self._kv_kept, self._kv_done):
            for k in list(table.keys()):
                e = table[k][1]
                total += e.nbytes
                if total > max_bytes:
                    total -= e.nbytes
                    e.clear()
                    del table[k]

    def _trajectory(self, st: EpisodeState, iteration: int) -> Trajectory:
        sp = st.spec
        return Trajectory(
            iteration=iteration, task_index=sp.task_index, rollout=sp.rollout, task=sp.task, group=sp.group,
            mode=sp.mode, segments=st.chat.segments, steps=st.steps, initial_score=st.initial_score,
            final_score=st.score, done=st.done, success=st.success, crashed=st.crashed,
            final_observation="" if st.crashed else st.observation,
            info={k: v for k, v in st.info.items() if k not in ("shown_tips",)} | {"messages": st.chat.messages,
                                                                                   "task_description": st.task_description})
