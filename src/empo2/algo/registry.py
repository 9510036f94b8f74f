"""Advantage estimators and extra loss terms by name: ``algo.advantage`` and ``algo.loss_terms``.

Both are tables of the project's one registry mechanism (``empo2.registry.Registry``), filled with the
built-ins below and by plug-ins (``run.plugins: [my_module]`` or an ``empo2.plugins`` entry point) that call
:func:`register_advantage` / :func:`register_loss_term` when imported (docs/architecture.md, "Extending").
The config checks a name against them before any work starts (``config.validate``), and this module
imports no torch, so that check stays cheap: the built-ins are registered lazily (``module:function``) and
what the trainer must know about an entry before it calls it — an estimator's anchor states, its smallest
group, a loss term's inputs — is read from the registration (:func:`advantage_spec`, :func:`loss_term_spec`)
without importing it.

**An advantage estimator** turns the returns of one iteration into one advantage per step-sample
(docs/algorithms.md, GRPO advantages and GiGPO; named dims B trajectories, N step-samples)::

    fn(returns, group_ids, step_traj, step_anchor, step_rewards, **options) -> (advantages [N], stats)

* ``returns``: ``[B]`` float64, each trajectory's return (``returns.episode_return`` + intrinsic part);
* ``group_ids``: ``[B]`` int64, the group (task instance of the iteration) of each trajectory;
* ``step_traj``: ``[N]`` int64 in ``[0, B)``, the trajectory of each step-sample, each trajectory's steps in
  time order;
* ``step_anchor``: ``[N]`` int64 anchor-state keys (``advantages.dense_ids`` of (group, anchor text)) when
  the estimator is registered with ``needs_anchor=True`` (the rollout engine then fetches the
  environment's anchor state every turn), else None;
* ``step_rewards``: ``[N]`` float64, each step's reward divided by the family's ``score_scale``;
* ``options``: the keyword arguments the function names, from ``norm_std`` (``algo.norm_std``), ``eps``
  (``algo.std_eps``), ``singleton`` (``algo.singleton``), ``episode_stats`` (``algo.episode_stats``),
  ``gamma`` (``algo.gigpo_gamma``), ``omega`` (``algo.gigpo_omega``) and every field of the estimator's own
  config section ``algo.<name>`` (all of which it must accept).

It returns ``[N]`` advantages (dtype of ``returns``) and a dict of plain floats, logged as ``train/adv/<key>``.

**A loss term** adds ``coef · value_t`` to the per-token policy loss before aggregation
(``loss.policy_loss``, docs/algorithms.md, Policy loss)::

    fn(inputs: loss.LossTermInputs, **settings) -> values [T]

``inputs`` holds the micro-batch's per-token tensors with masked positions already zeroed (T tokens); ``coef``
and ``settings`` are the fields of the term's config section ``algo.<name>`` (``coef`` is required). The
term's aggregated value is logged as ``train/<name>_loss``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from empo2.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "ADVANTAGES",
    "LOSS_TERMS",
    "AdvantageFn",
    "AdvantageSpec",
    "LossTermFn",
    "LossTermSpec",
    "advantage_spec",
    "loss_term_spec",
    "register_advantage",
    "register_loss_term",
]

AdvantageFn = Callable[..., "tuple[Tensor, dict[str, float]]"]
"""``fn(returns [B], group_ids [B], step_traj [N], step_anchor [N] | None, step_rewards [N], **options)``."""

LossTermFn = Callable[..., "Tensor"]
"""``fn(inputs: LossTermInputs, **settings) -> [T]`` per-token values."""

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator", "algo.advantage")
"""``algo.advantage`` → estimator function (see the module docstring for its signature)."""

LOSS_TERMS: Registry[LossTermFn] = Registry("loss term", "algo.loss_terms")
"""``algo.loss_terms`` entry → per-token term function (see the module docstring)."""

RESERVED_LOSS_TERMS = ("pg", "kl", "entropy")
"""Names a loss term may not take: ``policy_loss`` already reports ``pg_loss``, ``kl_loss``, ``entropy_loss``."""


@dataclass(frozen=True)
class AdvantageSpec:
    """What an advantage estimator needs from the trainer, declared when it is registered.

    Attributes:
        name: its ``algo.advantage`` name.
        needs_anchor: the estimator reads ``step_anchor`` (GiGPO's anchor-state groups), so the rollout
            engine fetches every turn's anchor state (``RolloutSettings.need_anchor``); otherwise
            ``step_anchor`` is None and no anchor is fetched.
        min_group_size: the smallest ``rollout.group_size`` with which it can give a non-zero advantage
            (2 for group baselines: a lone rollout has none); a smaller one is a config error.
        config: the dataclass of its config section ``algo.<name>`` (None: it has none).
    """

    name: str
    needs_anchor: bool = False
    min_group_size: int = 1
    config: type | None = None


@dataclass(frozen=True)
class LossTermSpec:
    """What a loss term needs from the learner, declared when it is registered.

    Attributes:
        name: its name in ``algo.loss_terms``.
        needs_entropy_grad: the term uses ``inputs.entropy`` with its gradient (the learner then keeps the
            entropy's graph, as for ``algo.entropy_coef > 0``); without it the entropy is given detached.
        needs_ref: the term uses ``inputs.logp_ref`` (the learner then keeps the frozen initial policy and
            scores every micro-batch with it, as for ``algo.kl_coef > 0``); without it ``logp_ref`` may be None.
        config: the dataclass of its config section ``algo.<name>`` (has a float field ``coef``).
    """

    name: str
    needs_entropy_grad: bool = False
    needs_ref: bool = False
    config: type | None = None


def _accepts(fn: Callable[..., Any], names: list[str]) -> list[str]:
    """The ``names`` that ``fn`` cannot take as keyword arguments ([] when it has ``**kwargs``)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [n for n in names if n not in params or params[n].kind is inspect.Parameter.POSITIONAL_ONLY]


def _check_section(kind: str, name: str, fn: Callable[..., Any], config: type | None, skip: tuple[str, ...]) -> None:
    """``config`` is a dataclass whose fields (less ``skip``) ``fn`` takes as keywords; its name is not taken by
    a section of the other table (both live under ``algo.<name>``)."""
    if config is None:
        return
    if not dataclasses.is_dataclass(config):
        raise ValueError(f"{kind} {name!r}: config must be a dataclass type, got {config!r}")
    fields = [f.name for f in dataclasses.fields(config) if f.name not in skip]
    missing = _accepts(fn, fields)
    if missing:
        raise ValueError(f"{kind} {name!r}: {getattr(fn, '__name__', fn)!r} does not take the keyword argument(s) "
                         f"{missing} of its config section algo.{name}; add them to its signature")
    other = LOSS_TERMS if kind == "advantage estimator" else ADVANTAGES
    if name in other and other.config_class(name) is not None:
        raise ValueError(f"{kind} {name!r}: the {other.kind} {name!r} already has the config section algo.{name}; "
                         "pick another name")


def register_advantage(name: str, fn: AdvantageFn, *, needs_anchor: bool = False, min_group_size: int = 1,
                       config: type | None = None, doc: str = "", replace: bool = False) -> AdvantageFn:
    """Register an advantage estimator under ``algo.advantage = name``; returns ``fn``.

    Args:
        name: the ``algo.advantage`` value that chooses it (letters, digits, ``_``, ``-``, ``.``).
        fn: the estimator (signature in the module docstring).
        needs_anchor: it reads ``step_anchor`` (see ``AdvantageSpec``).
        min_group_size: the smallest useful ``rollout.group_size`` (see ``AdvantageSpec``); ≥ 1.
        config: the dataclass of its section ``algo.<name>`` (fields documented with
            ``empo2.configschema.doc``), passed to ``fn`` as keyword arguments.
        doc: one line for listings.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad or taken name, ``min_group_size < 1``, ``config`` not a dataclass or with a field
            ``fn`` does not take, or a section name a loss term already uses.
    """
    if min_group_size < 1:
        raise ValueError(f"advantage estimator {name!r}: min_group_size must be >= 1, got {min_group_size}")
    _check_section("advantage estimator", name, fn, config, ())
    return ADVANTAGES.register(name, fn, config=config, doc=doc, replace=replace, needs_anchor=bool(needs_anchor),
                               min_group_size=int(min_group_size))


def register_loss_term(name: str, fn: LossTermFn, *, config: type, needs_entropy_grad: bool = False,
                       needs_ref: bool = False, doc: str = "", replace: bool = False) -> LossTermFn:
    """Register an extra per-token loss term under ``name`` (listed in ``algo.loss_terms``); returns ``fn``.

    Args:
        name: its name in ``algo.loss_terms``; its section is ``algo.<name>`` and its metric
            ``train/<name>_loss``. Not ``pg``, ``kl`` or ``entropy`` (the policy loss's own terms).
        fn: ``fn(inputs: loss.LossTermInputs, **settings) -> [T]`` float per-token values.
        config: the dataclass of its section ``algo.<name>``: a float field ``coef`` (the term's weight in
            the loss) and the term's settings, passed to ``fn`` as keyword arguments.
        needs_entropy_grad, needs_ref: what it reads (see ``LossTermSpec``).
        doc: one line for listings.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad, reserved or taken name; ``config`` not a dataclass, without ``coef``, with a field
            ``fn`` does not take, or a section name an advantage estimator already uses.
    """
    if name in RESERVED_LOSS_TERMS:
        raise ValueError(f"loss term name {name!r} is reserved (the policy loss reports {name}_loss); pick another")
    if not dataclasses.is_dataclass(config) or "coef" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"loss term {name!r}: config must be a dataclass with a float field 'coef' (the term's "
                         f"weight), got {config!r}")
    _check_section("loss term", name, fn, config, ("coef",))
    return LOSS_TERMS.register(name, fn, config=config, doc=doc, replace=replace,
                               needs_entropy_grad=bool(needs_entropy_grad), needs_ref=bool(needs_ref))


def advantage_spec(name: str) -> AdvantageSpec:
    """What estimator ``name`` needs, read from its registration (a lazy built-in is not imported).

    Raises:
        ConfigError: ``name`` is not registered (the message lists the registered names).
    """
    meta = ADVANTAGES.meta(name)
    return AdvantageSpec(name, bool(meta.get("needs_anchor", False)), int(meta.get("min_group_size", 1)),
                         ADVANTAGES.config_class(name))


def loss_term_spec(name: str) -> LossTermSpec:
    """What loss term ``name`` needs, read from its registration.

    Raises:
        ConfigError: ``name`` is not registered (the message lists the registered names).
    """
    meta = LOSS_TERMS.meta(name)
    return LossTermSpec(name, bool(meta.get("needs_entropy_grad", False)), bool(meta.get("needs_ref", False)),
                        LOSS_TERMS.config_class(name))


ADVANTAGES.register_lazy("grpo", "empo2.algo.advantages:grpo_step_advantages", min_group_size=2,
                         doc="episode-level group-normalised advantage for every step (docs/algorithms.md, GRPO "
                             "advantages)")
ADVANTAGES.register_lazy("gigpo", "empo2.algo.advantages:gigpo_advantages", needs_anchor=True, min_group_size=2,
                         doc="episode advantage + ω · anchor-state step advantage (docs/algorithms.md, GiGPO)")
