"""EMPO² at run time (docs/algorithms.md, Modes and EMPO² memory at run time): retrieval into prompts, novelty, tip writing, memory entries.

One object per run, plugged into the rollout engine as its ``StepHook`` and called by the
trainer after each rollout:

* ``before_turn`` (every turn, all live episodes at once): embed each episode's current state
  text (``empo2.memory.key_text``: the chat so far without tips, plus the new observation), retrieve
  up to k tips of the episode's bucket (task + variation) for memory-augmented rollouts, and keep
  the state embedding; with ``intrinsic.count: retrieved`` set the authors' r_int = 1/(retrieved + 1).
  Plain-mode states are queried as well and their tips kept unshown (``info["hidden_tips"]``), the
  baseline of ``memory/tip_follow_rate`` (``tipinfo.tip_follow_shares``).
* ``after_wave`` / ``after_rollout``: with ``intrinsic.count: similar_states``, r_int = 1/n of every
  step (n = similar states seen before + 1; states of the same turn never count each other,
  ``assign_intrinsic``); the current policy writes one tip per finished episode (batched, no
  gradient; the tip tokens never enter the update), all of a rollout's tips in one call while the
  caches kept for them fit the engine's byte cap, else as soon as the wave whose caches would not fit
  has ended (the kept KV caches are then freed before the next wave's grow; docs/notes/performance.md "Tip
  writing, batched"); after the rollout the tips are cleaned to one sentence; the episode's entries (one per
  step with the authors' wording, or one per episode) are added to the SQLite memory of the run, and the metrics
  named in ``empo2.tip_metrics`` (plug-ins' metrics, registered in the module ``empo2.tip_metrics``) are computed
  on the written tips.
  The tip prompt continues the trajectory with how the episode ended (final observation and score)
  and the tip instruction, so tip writing starts from the episode's KV cache kept by the rollout
  engine (``keep_episode_kv``) and prefills only that suffix; without one (KV reuse off, over its
  byte cap) each prompt is prefilled unpadded. The entries' key is the final state, final
  observation included.

The runtime does not build its memory: it receives a ``memory.backend.MemoryBackend`` (in process,
or a Ray actor shared by rollout workers: ``empo2.memory.backend``; ``make_runtime`` in
``methods/empo2/hooks.py`` opens the one the config asks for). Either persists in
``<run>/memory.sqlite`` so a resumed run continues with the same memory; the novelty counter's
state is saved in checkpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from empo2.agent.prompts import later_user_text, user_text
from empo2.algo.returns import Failure, family_failure
from empo2.memory.backend import MemoryBackend
from empo2.memory.novelty import intrinsic_from_retrieved
from empo2.memory.store import MEMORY_FILENAME, build_entries, shown_hits
from empo2.memory.text import final_score_text, key_text
from empo2.methods.base import Method
from empo2.methods.empo2.tipinfo import tip_follow_shares
from empo2.methods.empo2.tips import TIP_INSTRUCTION, TipPromptMode, clean_tip, summary_tip_messages
from empo2.policy.generator import Generation, GenerationRequest, Generator, SamplingParams
from empo2.policy.kvcache import kv_bytes_per_token
from empo2.policy.sampling import chunk_rows, row_seed
from empo2.records import ROLLOUT_SHOWS_TIPS, Mode, Trajectory
from empo2.rollout.engine import EpisodeState
from empo2.tip_metrics import compute_tip_metrics

log = logging.getLogger(__name__)

BUILTIN_TIP_KEYS = frozenset({"memory/tips_written", "memory/tips_malformed", "memory/entries_added",
                              "memory/tip_words_mean", "memory/tip_follow_rate", "memory/tip_follow_rate_plain",
                              "memory/tip_follow_steps", "memory/tip_follow_steps_plain", "memory/size",
                              "memory/retrieval_hit_rate", "memory/tips_per_step", "memory/tips_truncated",
                              "memory/intrinsic_mean", "memory/buckets"})
"""``memory/`` metrics the runtime reports itself: a tip metric (``empo2.tip_metrics``) may not return these."""

KEY_TEXT_MAX_CHARS = 2000
"""Characters of an entry's key text kept in the memory file (the head: all-MiniLM-L6-v2 embeds only
the first 256 word pieces, ≈ 1000 characters; recent-window keys are ≤ 900 characters anyway)."""
TIP_BATCH_MAX_BYTES = 512 * 1024 ** 2
"""CPU budget of what one tip-sampling call adds to memory beyond the episode caches it continues (the
batch cache takes their tensors over): left padding, uncached prompt ids (a whole prompt for a row without
a cache: 512 MiB ≈ 3 SmolLM2-135M fp32 rows of 3 600 tokens) and the room for the tip ids. The tip prompts
are sampled in chunks of rows that fit it (``sampling.chunk_rows``); on CUDA the budget is a share of the
free device memory instead (``tip_batch_budget``). docs/notes/performance.md "Tip writing, batched"."""
TIP_DEVICE_MEMORY_SHARE = 0.5
"""On CUDA, the share of the device's free memory (the driver's free bytes plus what PyTorch holds
reserved but unallocated) one tip-sampling call may add (``tip_batch_budget``)."""


def tip_batch_budget(model: Any) -> int:
    """Bytes one tip-sampling call may add to memory (``sampling.chunk_rows``'s ``max_bytes``).

    On a CUDA device, ``TIP_DEVICE_MEMORY_SHARE`` of its free memory now (``torch.cuda.mem_get_info`` plus
    PyTorch's reserved-but-unallocated bytes), at least ``TIP_BATCH_MAX_BYTES``; elsewhere (CPU, or a model
    without parameters) ``TIP_BATCH_MAX_BYTES``, read at call time.

    Args:
        model: the policy (a torch module; its first parameter's device is used).

    Returns:
        A byte count (int, > 0 unless ``TIP_BATCH_MAX_BYTES`` ≤ 0, which means no limit).
    """
    import torch

    try:
        device = next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return TIP_BATCH_MAX_BYTES
    if device.type != "cuda" or TIP_BATCH_MAX_BYTES <= 0:
        return TIP_BATCH_MAX_BYTES
    free, _total = torch.cuda.mem_get_info(device)
    spare = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(int(TIP_DEVICE_MEMORY_SHARE * (free + max(spare, 0))), TIP_BATCH_MAX_BYTES)


def rollout_state_text(messages: list[tuple[str, str]], task_description: str, observation: str, turn: int,
                       mode: str, recent_turns: int) -> str:
    """The state text a rollout embeds before turn ``turn`` (``Empo2Runtime.before_turn``): ``memory.text.key_text``
    of the tip-free chat so far plus the coming user turn exactly as the prompt will show it
    (``agent.prompts.user_text``: task + observation at turn 0).

    Args:
        messages: the episode's ``(role, content)`` turns so far (``EpisodeChat.messages``: user turns as
            ``user_text``, assistant turns as the decoded action, stripped).
        task_description, observation, turn: the coming user turn (``turn`` counted from 0).
        mode, recent_turns: ``empo2.memory.key_text`` / ``recent_turns``.

    A memory written outside a run keys its rows with it (``empo2 memory import``'s ``state``; the oracle
    memories of ``experiments/empo2_oracle``), so a rollout in that state queries with exactly the row's key.
    """
    return key_text(list(messages) + [("user", user_text(task_description, observation, turn))], mode, recent_turns)


def span_key(task: Any, span: str) -> str:
    """The bucket of a ``TaskSpec`` that spans one task ``variation`` (``env/task/variation``, ``TaskSpec.bucket``)
    or a whole ``task`` (``env/task``, every variation), for the tip memory (``empo2.memory.bucket``) and the
    novelty count (``empo2.intrinsic.bucket``; docs/algorithms.md, EMPO² memory at run time).

    Raises:
        ValueError: ``span`` is neither ``variation`` nor ``task``.
    """
    if span == "variation":
        return str(task.bucket)
    if span == "task":
        return f"{task.env}/{task.task}"
    raise ValueError(f"a bucket spans 'variation' or 'task', got {span!r}")


class Empo2Runtime(Method):
    """Memory, retrieval, novelty and tips of one run: the ``Method`` of EMPO² and of the memory-only
    baseline (``trainer.update: false``; ``methods.base`` has the table of hooks).

    Args:
        cfg: the run ``Config``.
        setup: the run ``Setup`` (model, chat format, engine).
        memory: the run's memory (entries + novelty counts), opened by the caller (``make_runtime``).
        embedder: the state embedder (``memory.embedder.load_embedder``) whose vectors ``memory`` holds.
        read_only: never write to the memory (evaluation/adaptation with another run's memory).
        generator: the run's generation backend (``policy.generator``), shared with the rollout
            engine: tips continue the KV caches it kept for the finished episodes (same keys).
        tip_source: where the tips of a state come from instead of retrieval (``None``: retrieval from
            ``memory``, the method): ``tip_source(state) -> list[str]``, called in ``before_turn`` for every
            live ``EpisodeState`` (``spec.task``, ``steps[*].action``, ``observation``, ``turn`` …). Memory-mode
            steps are shown its tips, plain steps keep them unshown (``info["hidden_tips"]``, the baseline of
            ``memory/tip_follow_rate``), ``intrinsic.count: retrieved`` counts them; ``empo2.memory.min_score``
            does not apply (they have no score). Everything else is unchanged: the memory still receives the
            run's own tips, novelty still counts the embedded states. A diagnostic tip source — e.g. the next
            gold action, ``experiments/empo2_oracle`` — is a training method plug-in whose factory passes it
            to ``hooks.make_runtime`` (docs/architecture.md, "Extending").
    """

    def __init__(self, cfg: Any, setup: Any, memory: MemoryBackend, embedder: Any, read_only: bool = False,
                 generator: Generator | None = None,
                 tip_source: Callable[[EpisodeState], list[str]] | None = None):
        if generator is None:
            raise ValueError("Empo2Runtime needs the run's generator (the rollout engine's), to sample tips")
        self.cfg = cfg
        self.setup = setup
        self.generator = generator
        self.mcfg = cfg.empo2.memory
        self.icfg = cfg.empo2.intrinsic
        self.embedder = embedder
        self.memory = memory
        self.read_only = read_only
        self.tips_during_rollout: bool | None = None
        """When the tips are sampled. None (default): at the end of a wave (``after_wave``) only when keeping
        the caches the engine kept for the waves so far until the rollout's end might not fit its byte cap
        (``_defer_tips``), else later, so that the tips of several waves (of all, usually) are sampled in one
        call; True: each wave's tips when the wave ends, from its kept caches; False: all in ``write_tips``
        (the engine then keeps every wave's caches until the rollout ends, within its byte cap)."""
        self.tip_source = tip_source
        self._early_tips: dict[str, Generation] = {}
        """Tips ``after_wave`` sampled, by ``Trajectory.id``, until ``write_tips`` stores them."""
        self._pending: list[Trajectory] = []
        """Finished writers of this rollout whose tips ``after_wave`` has not sampled yet (their caches kept)."""
        self._pending_bytes = 0
        """Bytes of the kept caches after the last ``after_wave`` (``Generator.cache_stats().kept_bytes``)."""
        self._reset_counters()

    @property
    def name(self) -> str:  # type: ignore[override]
        """``empo2``, or ``memory_only`` when the policy is not updated."""
        return "empo2" if self.cfg.trainer.update else "memory_only"

    @property
    def updates_policy(self) -> bool:  # type: ignore[override]
        return bool(self.cfg.trainer.update)

    def _reset_counters(self) -> None:
        self.c = {"queries": 0, "hits": 0, "tips_shown": 0, "tips_low_score": 0}

    # ------------------------------------------------------------------ StepHook
    def step_hook(self) -> "Empo2Runtime":
        """This object as the engine's ``StepHook``."""
        self._reset_counters()
        self._pending, self._pending_bytes = [], 0
        return self

    def _state_text(self, st: EpisodeState) -> str:
        """The state text of ``st`` before its coming turn: the tip-free chat plus the coming user turn
        exactly as the prompt will show it (task + observation at turn 0), so a state has the same
        text in its own query and inside later keys (docs/algorithms.md, EMPO² memory at run time: the state text)."""
        return rollout_state_text(st.chat.messages, st.task_description, st.observation, st.turn, self.mcfg.key_text,
                                  self.mcfg.recent_turns)

    def before_turn(self, states: list[EpisodeState]) -> None:
        """Set ``state.tips`` for every live episode (batched embedding) and keep the state embedding.

        ``state.intrinsic`` is set here only for ``intrinsic.count: retrieved`` (it needs this
        turn's retrieval); ``similar_states`` novelty is computed after the rollout by
        ``assign_intrinsic``, when every episode's states are known, so that it does not depend
        on which rollout or wave ran first.
        """
        if not states:
            return
        embs = self.embedder.encode([self._state_text(st) for st in states])
        # plain states are queried too, and their tips kept unseen (``info["hidden_tips"]``): the baseline of
        # memory/tip_follow_rate (``tipinfo.tip_follow_shares``); they are never shown nor counted as hits
        if self.tip_source is not None:
            found = [list(self.tip_source(st)) for st in states]
            n_found = [len(f) for f in found]
        else:
            hits = self.memory.query([self.bucket(st.spec.task) for st in states], embs, self.mcfg.threshold,
                                     self.mcfg.top_k, compare=self.mcfg.compare, ties=self.mcfg.ties,
                                     retriever=self.mcfg.retriever)
            n_found = [len(h) for h in hits]
            found = [[h.text for h in shown_hits(hs, self.mcfg.min_score)] for hs in hits]
        for i, (st, e) in enumerate(zip(states, embs)):
            st.tips = []
            if not ROLLOUT_SHOWS_TIPS[st.spec.mode]:
                st.info.setdefault("hidden_tips", []).append(found[i])
            else:
                st.tips = list(found[i])
                self.c["queries"] += 1
                self.c["hits"] += int(len(st.tips) > 0)
                self.c["tips_shown"] += len(st.tips)
                self.c["tips_low_score"] += n_found[i] - len(st.tips)
            # one per turn: state_embeddings[i] is the state step i was chosen in (novelty, after the rollout)
            st.info.setdefault("state_embeddings", []).append(e)
        if self.icfg.enabled and self.icfg.count == "retrieved":
            for i, st in enumerate(states):  # authors: 1/(retrieved + 1) in tip modes, 0 in plain mode
                st.intrinsic = intrinsic_from_retrieved(n_found[i]) if ROLLOUT_SHOWS_TIPS[st.spec.mode] else 0.0

    def keep_episode_kv(self, st: EpisodeState) -> bool:
        """``StepHook`` extension: keep a finished episode's KV cache when it will write a tip from it
        (``empo2.tips.prompt: trajectory``; the summary prompts share no prefix with the episode)."""
        return (not self.read_only and not st.crashed and bool(st.steps) and self._writes_mode(st.spec.mode)
                and TipPromptMode(self.cfg.empo2.tips.prompt) is TipPromptMode.TRAJECTORY)

    def after_wave(self, trajs: list[Trajectory]) -> None:
        """``StepHook`` extension, called by the engine when a wave of episodes has ended: sample the
        tips of this wave and of the waves that waited, continuing the caches the engine kept for them,
        so those caches are freed before the next wave's grow (kept until the rollout's end they pile up
        to the engine's byte cap, on top of the live ones; docs/notes/performance.md) — unless they may wait
        (``tips_during_rollout`` None and ``_defer_tips``): then they are sampled with a later wave's, or
        in ``write_tips``, in one call (one decode batch where it fits instead of one per wave:
        docs/notes/performance.md "Tip writing, batched"). The tips enter the memory in ``write_tips`` after the
        rollout, as before: no episode of an iteration retrieves another's tip of the same iteration.
        A tip's sampling seed comes from the trajectory's ids (its rollout's ``iteration``), so when it is
        sampled does not change which random numbers it gets."""
        if self.tips_during_rollout is False or self.read_only:
            return
        self._pending.extend(t for t in trajs if self._writes(t))
        if not self._pending or (self.tips_during_rollout is None and self._defer_tips()):
            return
        todo, self._pending, self._pending_bytes = self._pending, [], 0
        for t, g in zip(todo, self.sample_tips(todo, todo[0].iteration)):
            self._early_tips[t.id] = g

    def _defer_tips(self) -> bool:
        """Whether the waiting tips may wait for the next wave: the summary prompts hold no cache
        (``keep_episode_kv``), so always; the trajectory prompt while the kept caches, plus as much again as
        the last wave added (the next wave's live caches, about), fit ``rollout.kv_cache_max_bytes`` (with
        ``rollout.kv_cache: false`` nothing is kept: always; with no cap, 0: never)."""
        if TipPromptMode(self.cfg.empo2.tips.prompt) is not TipPromptMode.TRAJECTORY:
            return True
        if not getattr(self.cfg.rollout, "kv_cache", True):
            return True
        cap = int(getattr(self.cfg.rollout, "kv_cache_max_bytes", 0) or 0)
        if cap <= 0:
            return False
        kept = int(self.generator.cache_stats().kept_bytes)
        wave = max(kept - self._pending_bytes, 0)
        self._pending_bytes = kept
        return kept + wave <= cap

    # ------------------------------------------------------------------ tips + memory
    def bucket(self, task: Any) -> str:
        """The memory bucket of a ``TaskSpec`` (``empo2.memory.bucket``): ``env/task/variation`` (``TaskSpec.bucket``)
        or, for ``task``, ``env/task`` — every variation's tips in one bucket."""
        return span_key(task, self.mcfg.bucket)

    def novelty_bucket(self, task: Any) -> str:
        """The novelty-count bucket of a ``TaskSpec`` (``empo2.intrinsic.bucket``): the memory's (``bucket``) for
        ``memory``, else ``span_key`` of ``variation`` / ``task`` (docs/algorithms.md, EMPO² memory at run time)."""
        span = self.icfg.bucket
        return self.bucket(task) if span == "memory" else span_key(task, span)

    def _writes_mode(self, mode: Mode) -> bool:
        if self.cfg.empo2.p == 0 and not ROLLOUT_SHOWS_TIPS[mode]:
            # GRPO + novelty (empo2.methods): no training rollout ever reads a tip. Rollouts that read the memory
            # still write (``empo2 adapt`` of a p 0 checkpoint plays Mode.ON_TIPS into its adaptation memory)
            return False
        w = self.cfg.empo2.write_memory
        return w == "always" or (w == "memory_modes" and ROLLOUT_SHOWS_TIPS[mode])

    def _writes(self, t: Trajectory) -> bool:
        if t.crashed or t.num_steps == 0:
            return False
        return self._writes_mode(t.mode)

    def entry_score(self, t: Trajectory) -> float:
        """The episode score the memory records and the tip prompt shows (0..100): a failure (ScienceWorld's
        −100) becomes 0 unless the environment family keeps failures (``algo.returns.family_failure``:
        ScienceWorld's ``env.scienceworld.failure: keep``), as in the return."""
        keep = family_failure(getattr(self.setup, "family", None)) is Failure.KEEP
        return t.final_score if keep else max(t.final_score, 0.0)

    def final_messages(self, t: Trajectory) -> list[tuple[str, str]]:
        """The trajectory's chat messages (tip-free) plus its final observation as the last user message:
        the text of the episode's final state, embedded as the key of its entries (docs/algorithms.md, EMPO² memory at run time)."""
        return list(t.info.get("messages", [])) + [("user", later_user_text(t.final_observation))]

    def tip_example(self) -> Any:
        """The environment family's worked tip example (``envs.base.TipExample``; its ``tip_example()``),
        or None when the family has none (the generic ``tips.SUMMARY_TIP_EXAMPLE`` is used)."""
        example_of = getattr(getattr(self.setup, "family", None), "tip_example", None)
        return example_of() if callable(example_of) else None

    def tip_prompts(self, trajs: list[Trajectory]) -> list[list[int]]:
        """The tip prompt of each trajectory (docs/algorithms.md, EMPO² memory at run time).

        Layout: the trajectory's ids (with tips, exactly as sampled), then a user turn with how the
        episode ended — ``later_user_text(final_observation)`` and the final score in the authors'
        wording (``final_score_text``) — then a user turn with ``TIP_INSTRUCTION``, then the opening
        of the assistant turn. The authors' tip prompt also ends with the final observation as its
        own user message before the instruction; the score sentence is our addition (the same one
        the entries carry). The trajectory's ids stay a prefix, so the KV cache kept by the rollout
        engine is reused and only this suffix is prefilled; the final observation is in no segment,
        so the update's packed sequences do not change.

        With ``empo2.tips.prompt: summary`` / ``summary_fewshot`` the prompt is instead a short chat
        without system message (``tips.summary_tip_messages``: the task, the executed actions,
        the final observation and score, a one-sentence instruction; with an example of another task
        first), measured to give more grounded tips at 135M (docs/notes/learning.md "Tips at 135M").

        Cut from the left to ``model.max_context - tips.max_new_tokens`` ids if longer.
        """
        fmt = self.setup.fmt
        budget = self.cfg.model.max_context - self.cfg.empo2.tips.max_new_tokens
        mode = TipPromptMode(self.cfg.empo2.tips.prompt)
        if mode is not TipPromptMode.TRAJECTORY:
            example = self.tip_example()
            out = []
            for t in trajs:
                ids: list[int] = []
                for role, text in summary_tip_messages(str(t.info.get("task_description", "")),
                                                       [s.action for s in t.steps], t.final_observation,
                                                       self.entry_score(t), mode is TipPromptMode.SUMMARY_FEWSHOT,
                                                       example):
                    ids += fmt.open(role) + fmt.encode(text) + fmt.close(role)
                ids += fmt.open("assistant")
                out.append(ids[-budget:] if len(ids) > budget else ids)
            return out
        ask = fmt.open("user") + fmt.encode(TIP_INSTRUCTION) + fmt.close("user") + fmt.open("assistant")
        out = []
        for t in trajs:
            ending = f"{later_user_text(t.final_observation)}\n\n{final_score_text(self.entry_score(t))}"
            ids = t.token_ids(with_tips=True) + fmt.open("user") + fmt.encode(ending) + fmt.close("user") + ask
            out.append(ids[-budget:] if len(ids) > budget else ids)
        return out

    def sample_tips(self, trajs: list[Trajectory], iteration: int) -> list[Generation]:
        """Sample one tip continuation per trajectory (no gradient), as ``Generation`` s in order.

        One ``Generator.generate`` request per trajectory, keyed by ``Trajectory.id``: a row starts
        from the episode's KV cache the rollout engine kept under that key (its ids are a prefix of
        the tip prompt, so only the closing markup and the tip instruction are prefilled) or, without
        one, from an empty cache (the prompt is prefilled unpadded; rows share their common prefix);
        only the decode is batched (in the sampler's length buckets), all rows in one call unless what
        the call adds to memory beyond the kept caches (padding, uncached prompt ids, room for the tip)
        passes ``tip_batch_budget`` (a share of the free device memory on CUDA, ``TIP_BATCH_MAX_BYTES``
        on CPU): then in chunks of rows that fit it (``sampling.chunk_rows``). Which rows share a call
        changes a row's logits by float rounding only, never its random numbers.
        The ids equal those of ``sample`` on the same prompts and seeds (log-probs up to float
        rounding). Each row's cache is released as soon as its tip is sampled (``release_cache``).
        The seed of a row is ``row_seed(run.seed, iteration, task, rollout, 99991)``.

        Args:
            trajs: finished trajectories (each with a unique ``id``).
            iteration: the rollout's iteration (part of each row's seed).

        Returns:
            one ``Generation`` per trajectory (ids ``[≤ empo2.tips.max_new_tokens]`` int, log-probs float), in order.
        """
        tcfg = self.cfg.empo2.tips
        prompts = self.tip_prompts(trajs)
        params = SamplingParams(max_new_tokens=tcfg.max_new_tokens, temperature=tcfg.temperature,
                                autocast=self.cfg.model.autocast)
        reqs = [GenerationRequest(p, seed=row_seed(self.cfg.run.seed, iteration, t.task_index, t.rollout, 99991),
                                  cache_key=t.id, release_cache=True) for t, p in zip(trajs, prompts)]
        # chunks of what the call adds beyond the kept caches (their tensors move into the batch cache):
        # a budget of the batch cache alone split a big model's tips into many sequential decodes
        # (docs/notes/performance.md "Tip writing, batched")
        model = self.setup.policy.model
        chunks = chunk_rows([len(p) for p in prompts], tcfg.max_new_tokens, kv_bytes_per_token(model) or 0,
                            tip_batch_budget(model), cached=self._cached_tokens(trajs, prompts))
        out: list[Any] = [None] * len(trajs)
        try:
            for rows in chunks:
                for r, g in zip(rows, self.generator.generate([reqs[r] for r in rows], params)):
                    out[r] = g
            return out
        finally:
            self.generator.release([t.id for t in trajs])

    def _cached_tokens(self, trajs: list[Trajectory], prompts: list[list[int]]) -> list[int]:
        """Per row, the prompt tokens the generator's kept cache of the trajectory already holds (0 when it
        keeps none, or cannot say: only ``HFGenerator.kept_cache`` is asked)."""
        kept_cache = getattr(self.generator, "kept_cache", None)
        out = []
        for t, p in zip(trajs, prompts):
            e: Any = kept_cache(t.id) if callable(kept_cache) else None
            n = int(getattr(e, "length", 0) or 0) if e is not None else 0
            out.append(n if 0 < n < len(p) and list(p[:n]) == list(e.ids[:n]) else 0)
        return out

    def _tips_of(self, todo: list[Trajectory], iteration: int) -> list[Generation]:
        """The tips ``after_wave`` sampled for ``todo``; the missing ones (waiting or never sampled) are
        sampled now, in one call."""
        early = {t.id: self._early_tips.pop(t.id) for t in todo if t.id in self._early_tips}
        self._early_tips.clear()
        self._pending, self._pending_bytes = [], 0
        missing = [t for t in todo if t.id not in early]
        if missing:
            early.update({t.id: g for t, g in zip(missing, self.sample_tips(missing, iteration))})
        return [early[t.id] for t in todo]

    def write_tips(self, trajs: list[Trajectory], iteration: int) -> dict[str, float]:
        """Sample one tip per finished trajectory (batched, no gradient) and store its entries.

        Returns the ``memory/`` metrics of the tips: ``tips_written``, ``tips_malformed``, ``entries_added`` and,
        when at least one tip was written, ``tip_words_mean`` and the metrics of ``empo2.tip_metrics``
        (``tip_metrics.compute_tip_metrics`` on the written tips, their trajectories and ``tip_example()``).

        A tip metric that fails or answers garbage is left out with a warning (``tip_metrics.compute_tip_metrics``).
        """
        try:
            return self._write_tips(trajs, iteration)
        finally:  # caches the engine kept for trajectories that wrote no tip
            self.generator.release()

    def _write_tips(self, trajs: list[Trajectory], iteration: int) -> dict[str, float]:
        todo = [t for t in trajs if self._writes(t)]
        out = {"memory/tips_written": 0.0, "memory/tips_malformed": 0.0, "memory/entries_added": 0.0}
        if not todo or self.read_only:
            return out
        fmt = self.setup.fmt
        gens = self._tips_of(todo, iteration)
        words: list[int] = []
        written: list[str] = []
        writers: list[Trajectory] = []
        key_texts = [key_text(self.final_messages(t), self.mcfg.key_text, self.mcfg.recent_turns) for t in todo]
        keys = self.embedder.encode(key_texts)
        for t, g, key, final in zip(todo, gens, keys, key_texts):
            tip = clean_tip(fmt.decode(g.ids))
            if tip is None:
                out["memory/tips_malformed"] += 1
                continue
            t.tip = tip
            out["memory/tips_written"] += 1
            words.append(len(tip.split()))
            written.append(tip)
            writers.append(t)
            # the embedded text; full_history keys are long, and MiniLM reads only their head anyway
            entries = build_entries(self.bucket(t.task), key, final[:KEY_TEXT_MAX_CHARS], tip, self.entry_score(t),
                                    iteration, [s.action for s in t.steps], self.mcfg.entry_text)
            out["memory/entries_added"] += self.memory.add(entries)
        if words:
            out["memory/tip_words_mean"] = float(np.mean(words))
        names = list(getattr(self.cfg.empo2, "tip_metrics", []) or [])
        if names and written:  # empo2.tip_metrics: plug-ins' metrics of the written tips (empo2.tip_metrics module)
            out.update(compute_tip_metrics(names, written, writers, self.tip_example(), reserved=BUILTIN_TIP_KEYS))
        return out

    def assign_intrinsic(self, trajs: list[Trajectory]) -> None:
        """Set ``StepRecord.intrinsic`` of every step for ``intrinsic.count: similar_states`` (docs/algorithms.md, EMPO² memory at run time).

        r_int = 1/n with n = similar states seen before + 1, where "before" means earlier
        iterations and earlier turns of this one (``NoveltyCounter.observe_episodes``): states of
        the same turn never count each other, so identical rollouts get identical rewards
        whatever their order or wave. The iteration's states are recorded afterwards. Does
        nothing for ``count: retrieved`` (set during the rollout) or when the reward is off.
        """
        if not self.icfg.enabled or self.icfg.count != "similar_states":
            return
        trajs = [t for t in trajs if t.num_steps]
        embs = []
        for t in trajs:
            e = t.info.get("state_embeddings", [])[: t.num_steps]
            if len(e) != t.num_steps:
                raise ValueError(f"{t.id}: {len(e)} state embeddings for {t.num_steps} steps; "
                                 "was the rollout run with this runtime's step_hook()?")
            embs.append(np.stack(e))
        r = self.memory.observe_episodes([self.novelty_bucket(t.task) for t in trajs], embs)
        for t, rt in zip(trajs, r):
            for s, ri in zip(t.steps, rt):
                s.intrinsic = float(ri)

    def after_rollout(self, trajs: list[Trajectory], iteration: int) -> dict[str, float]:
        """Intrinsic rewards (``assign_intrinsic``), tips/entries; return the ``memory/…`` metrics."""
        self.assign_intrinsic(trajs)
        m = self.write_tips(trajs, iteration)
        q = self.c["queries"]
        m["memory/retrieval_hit_rate"] = self.c["hits"] / q if q else 0.0
        m["memory/tips_per_step"] = self.c["tips_shown"] / q if q else 0.0
        if self.mcfg.min_score is not None:  # retrieved but not shown: episode score below empo2.memory.min_score
            m["memory/tips_below_min_score_per_step"] = self.c["tips_low_score"] / q if q else 0.0
        m.update(tip_follow_shares(trajs))  # memory/tip_follow_rate{,_plain}: actions named by retrieved tips
        r_int = [s.intrinsic for t in trajs for s in t.steps] if self.icfg.enabled else []
        m["memory/intrinsic_mean"] = float(np.mean(r_int)) if r_int else 0.0
        truncated = [x for t in trajs for x in t.info.get("tips_truncated", [])]
        m["memory/tips_truncated"] = float(sum(truncated))
        snap = self.memory.snapshot()
        m["memory/size"] = float(snap["entries"])
        m["memory/buckets"] = float(len(snap["buckets"]))
        for b, n in sorted(snap["buckets"].items())[:50]:
            m[f"memory/size/{b}"] = float(n)
        self._reset_counters()
        return m

    # ------------------------------------------------------------------ checkpointing
    def state(self) -> dict[str, Any]:
        """Novelty-counter state for the checkpoint (the memory itself lives in SQLite)."""
        return {"novelty": self.memory.novelty_state()}

    def checkpoint_extra(self) -> dict[str, Any]:
        """``Method`` hook: the novelty state (``tensors``) and the memory's entry count and digest
        (``memory``: ``trainer.resume.check_memory_matches`` checks them on ``--resume``)."""
        n, digest = self.memory.digest()
        return {"tensors": self.state(), "memory": {"file": MEMORY_FILENAME, "entries": n, "sha256": digest}}

    def after_checkpoint(self, oldest_kept: int) -> None:
        """``Method`` hook: forget evicted entries that no kept checkpoint (oldest: ``oldest_kept``) can
        roll back to."""
        if not self.read_only:
            self.memory.forget_evicted(oldest_kept - 1)

    def load_state(self, extra: dict[str, Any]) -> None:
        """``Method`` hook: the novelty state from a checkpoint's ``extra`` record (its ``tensors``)."""
        tensors = extra.get("tensors") or {}
        if tensors and "novelty" in tensors:
            self.memory.load_novelty_state(tensors["novelty"])

    def resume(self, iteration: int) -> int:
        """``Method`` hook: drop entries written after ``iteration`` (resuming from an older checkpoint)."""
        return self.truncate_after(iteration)

    def truncate_after(self, iteration: int) -> int:
        """Drop entries written after ``iteration`` (resuming from an older checkpoint)."""
        return self.memory.truncate(iteration) if not self.read_only else 0

    def close(self) -> None:
        self.memory.close()
