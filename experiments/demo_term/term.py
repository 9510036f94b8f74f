"""The demonstration term as an auxiliary objective (package docstring): its config section ``algo.sft``, its config
check, and the objective that loads, packs, draws and backpropagates the demonstrations."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from empo2.algo.registry import register_aux_objective
from empo2.configschema import ConfigError, doc
from empo2.trainer.auxiliary import AuxObjective, AuxStep

log = logging.getLogger(__name__)

__all__ = ["DEMO_TERM", "DemoTerm", "DemoTermConfig", "check_demo_term", "make_demo_term", "term_demos"]

DEMO_TERM = "sft"
"""The ``algo.aux_objectives`` entry of the term: its section is ``algo.sft``, its metrics ``train/sft_loss`` and
``train/sft_nll``."""


@dataclass
class DemoTermConfig:
    """``algo.sft``: the weight of the demonstration term, its demonstrations and how many each step draws."""

    coef: float = doc("λ_SFT: weight of the token-mean NLL of the demonstrations in every optimiser step (> 0; to turn "
                      "the term off, leave sft out of algo.aux_objectives)", default=0.1)
    data: list[str] = doc("demonstrations, as sft.data: 'gold', a plug-in's source (e.g. gold_tips with "
                          "run.plugins=[experiments.gold_tips]) or trajectory JSONL files such as a warm-up's "
                          "<run>/sft_demos.jsonl; sft.min_score, sft.variations_per_task and sft.<source> apply; "
                          "files are read when training starts", default_factory=list)
    episodes: int = doc("demonstration episodes drawn (seeded) for each optimiser step (all of them when fewer; a "
                        "warning says so)", default=4)

    def __post_init__(self) -> None:
        if isinstance(self.coef, bool) or not 0.0 < self.coef <= 1e6:
            raise ConfigError(f"algo.sft.coef = {self.coef!r} is out of range; it must be a number in (0, 1e6] (to "
                              "turn the term off, leave sft out of algo.aux_objectives)")
        if isinstance(self.episodes, bool) or not 1 <= self.episodes <= 100_000:
            raise ConfigError(f"algo.sft.episodes = {self.episodes!r} is out of range; it must be an integer in "
                              "[1, 100000]")


def check_demo_term(cfg: Any) -> None:
    """The configs the term refuses before any work (``config.validate`` calls it when ``sft`` is listed).

    Raises:
        ConfigError: no demonstrations in ``algo.sft.data``.
    """
    if not cfg.algo.sft.data:
        raise ConfigError("algo.aux_objectives=[sft] needs demonstrations: set algo.sft.data (e.g. "
                          "'algo.sft.data=[runs/<warm-up>/sft_demos.jsonl]' or [gold])")


def term_demos(cfg: Any, family: Any, settings: DemoTermConfig) -> list[dict[str, Any]]:
    """The demonstration records of the term: ``algo.sft.data`` read like ``sft.data`` (``empo2.demos.expert.load_demos``)
    with ``sft.min_score``, ``sft.variations_per_task`` (which train variations a gold-path source plays), ``run.seed``
    and each source's section ``sft.<name>``. Called when a run builds the term, before the model loads.

    Raises:
        ConfigError / TrajectoryFileError: as ``load_demos`` (a missing or malformed JSONL file, a source that is not
            registered, no demonstration), naming ``algo.sft.data``.
    """
    from empo2.demos.expert import load_demos, variation_pairs  # (imports torch: only when a run builds it)
    from empo2.sft_config import sft_section

    tasks = [family.resolve_task(t) for t in cfg.env.tasks]
    pairs = variation_pairs(family, tasks, cfg.env.variations, cfg.sft.variations_per_task)
    sections = {n: sft_section(cfg.sft, n) for n in settings.data}
    return load_demos(settings.data, family, tasks, pairs, cfg.sft.min_score, cfg.env.num_workers, seed=cfg.run.seed,
                      sections={n: s for n, s in sections.items() if s is not None}, key=f"algo.{DEMO_TERM}.data")


class DemoTerm(AuxObjective):
    """The demonstration term of one run: its records (read before the model loads, ``term_demos``), packed in
    ``prepare`` and drawn per optimiser step in ``backward``.

    Args:
        cfg: the run ``Config`` (``action.few_shot``, ``env.max_turns``, ``model.max_context`` are read when packing);
        settings: its ``DemoTermConfig`` (``algo.sft``); demos: the episode records (``empo2.demos.expert`` format).

    Attributes:
        samples: the packed demonstrations (``prepare``; each with at least one action token).
    """

    def __init__(self, cfg: Any, settings: DemoTermConfig, demos: list[dict[str, Any]]):
        self.cfg, self.settings, self.demos = cfg, settings, demos
        self.samples: list[Any] = []

    def prepare(self, setup: Any) -> None:
        """Pack the demonstrations with the run's chat markup (``empo2.sft.objective.demo_samples``), cut to
        ``env.max_turns`` steps and ``model.max_context`` tokens.

        Raises:
            ConfigError: no demonstration keeps an action token within ``model.max_context``.
        """
        from empo2.sft.objective import demo_samples

        c = self.cfg
        samples, n_steps = demo_samples(self.demos, setup.fmt, setup.family, c.action.few_shot, c.env.max_turns,
                                        c.model.max_context)
        if not samples:
            raise ConfigError(f"algo.{DEMO_TERM}.data: none of the {len(self.demos)} demonstrations has an action "
                              f"token within model.max_context={c.model.max_context} (the system prompt and first "
                              "observation fill it); raise model.max_context or set action.few_shot=false")
        if self.settings.episodes > len(samples):
            log.warning("algo.%s.episodes=%d but only %d demonstrations: each optimiser step uses all %d", DEMO_TERM,
                        self.settings.episodes, len(samples), len(samples))
        log.info("algo.%s.coef %s: %d demonstrations, %d steps, %d action tokens", DEMO_TERM, self.settings.coef,
                 len(samples), n_steps, sum(s.num_targets for s in samples))
        self.samples = samples

    def backward(self, step: AuxStep) -> dict[str, float]:
        """Backpropagate ``step.coef`` × the token-mean NLL of ``algo.sft.episodes`` demonstrations drawn for this
        optimiser step without replacement (``numpy.random.default_rng([run.seed, 23, iteration, step])``).

        Returns:
            ``{"loss": nll, "nll": nll}``: the batch's NLL in nats per action token, before the step (unscaled).

        Raises:
            RuntimeError: ``prepare`` has not run.
        """
        import numpy as np

        from empo2.sft.objective import demo_nll_backward

        if not self.samples:
            raise RuntimeError("DemoTerm.backward before prepare: the demonstrations are not packed")
        rng = np.random.default_rng([step.seed, 23, step.iteration, step.step])
        n = min(self.settings.episodes, len(self.samples))
        batch = [self.samples[i] for i in rng.choice(len(self.samples), size=n, replace=False)]
        nll = demo_nll_backward(step.model, batch, pad_id=step.pad_id, micro_batch_tokens=step.micro_batch_tokens,
                                logprob_chunk=step.logprob_chunk, checkpoint_head=step.checkpoint_head,
                                scale=step.coef, amp=step.amp)
        return {"loss": nll, "nll": nll}


def make_demo_term(cfg: Any, family: Any, settings: DemoTermConfig) -> DemoTerm:
    """The factory of ``algo.aux_objectives: [sft]`` (``register_aux_objective``): a ``DemoTerm`` on the records of
    ``term_demos`` (read now, before the model loads).

    Raises:
        ConfigError / TrajectoryFileError: as ``term_demos``.
    """
    return DemoTerm(cfg, settings, term_demos(cfg, family, settings))


register_aux_objective(DEMO_TERM, make_demo_term, config=DemoTermConfig, check=check_demo_term,
                       doc="token-mean NLL of demonstrations added to every optimiser step (PPO-ptx; a diagnostic, "
                           "experiments/)")
