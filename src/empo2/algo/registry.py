"""Advantage estimators, policy losses, extra loss terms and auxiliary objectives by name: ``algo.advantage``,
``algo.policy_loss``, ``algo.loss_terms`` and ``algo.aux_objectives``.

All four are tables of the project's one registry mechanism (``empo2.registry.Registry``), filled with the
built-ins below and by plug-ins (``run.plugins: [my_module]`` or an ``empo2.plugins`` entry point) that call
:func:`register_advantage` / :func:`register_policy_loss` / :func:`register_loss_term` /
:func:`register_aux_objective` when imported
(docs/architecture.md, "Extending"). The config checks a name against them before any work starts
(``config.validate``), and this module imports no torch, so that check stays cheap: the built-ins are registered
lazily (``module:function``) and what the trainer must know about an entry before it calls it — an estimator's
anchor states, its smallest group, a loss term's inputs, an objective's config check — is read from the
registration (:func:`advantage_spec`, :func:`loss_term_spec`, :func:`aux_objective_spec`) without importing it.

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

**A policy loss** is the policy-gradient part ℓ_pg of the per-token loss (``loss.policy_loss``, docs/algorithms.md,
Policy loss; verl's ``register_policy_loss``)::

    fn(inputs: loss.LossTermInputs, **options) -> loss.PolicyLossTokens

``inputs`` holds the micro-batch's per-token tensors (T tokens, masked positions zeroed; ``ratio`` is the importance
ratio ρ = π_θ/μ with its gradient); ``options`` are the keyword arguments the function names from ``clip_low``,
``clip_high``, ``dual_clip`` (``algo.clip_low``, ``algo.clip_high``, ``algo.dual_clip``) and every field of its own
config section ``algo.<name>`` (all of which it must accept). It returns ``pg`` ``[T]`` (with the gradient of
``logp_current``) and, optionally, where its clip acts (``clipped``, ``dual_clipped``: ``[T]`` bool, logged as
``train/clip_frac*``), each token's gradient weight (``grad_weight``) and its own per-token diagnostics (``metrics``,
logged as ``train/pg_<key>``); it must not modify ``inputs`` in place.
The KL, entropy bonus, extra terms and aggregation are added around it whatever the policy loss. A loss registered
with ``advantage_linear=True`` declares ℓ_t positively homogeneous in A_t (0 at A_t = 0, ℓ(w·A) = w·ℓ(A) for w > 0,
as PPO's clip and CISPO are): only then does the learner skip zero-advantage trajectories
(``trainer.skip_zero_advantage``) and may ``algo.mismatch.tis_cap`` weight tokens by scaling their advantage.
Built in: ``ppo_clip`` (PPO's clipped surrogate with dual clip).

**A loss term** adds ``coef · value_t`` to the per-token policy loss before aggregation
(``loss.policy_loss``, docs/algorithms.md, Policy loss)::

    fn(inputs: loss.LossTermInputs, **settings) -> values [T]

``inputs`` holds the micro-batch's per-token tensors with masked positions already zeroed (T tokens); ``coef``
and ``settings`` are the fields of the term's config section ``algo.<name>`` (``coef`` is required). The
term's aggregated value is logged as ``train/<name>_loss``.

**An auxiliary objective** is a loss on data of its own, added to every optimiser step of the policy update: the
"PPO-ptx" pattern of InstructGPT (Ouyang et al. 2022, Eq. 2: the RL objective plus γ · the log-likelihood of
pre-training data), here with any data and loss a plug-in brings (docs/algorithms.md, Policy loss, "Auxiliary
objectives")::

    factory(cfg: Config, family: EnvFamily, settings) -> trainer.auxiliary.AuxObjective

``settings`` is its config section ``algo.<name>`` (``coef`` is required: the objective's weight). The factory is
called when ``empo2 train`` starts, before the model loads (so its data can fail first); the object's ``prepare(setup)``
runs once the model and tokenizer are loaded, and its ``backward(step)`` at every optimiser step, after the
micro-batches of the policy loss and before gradient clipping: it backpropagates ``coef`` × its loss into the
parameters' ``.grad`` and returns its metrics (``trainer.auxiliary`` has the contract). The learner logs
``train/<name>_loss`` = coef × its loss and ``train/<name>_<key>`` for its other metrics, each the mean over the
update's optimiser steps.
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
    "AUX_OBJECTIVES",
    "LOSS_TERMS",
    "AdvantageFn",
    "AdvantageSpec",
    "AuxObjectiveFactory",
    "AuxObjectiveSpec",
    "POLICY_LOSSES",
    "PolicyLossFn",
    "PolicyLossSpec",
    "LossTermFn",
    "LossTermSpec",
    "advantage_spec",
    "aux_objective_spec",
    "loss_term_spec",
    "register_advantage",
    "register_aux_objective",
    "register_loss_term",
    "register_policy_loss",
    "policy_loss_spec",
]

AdvantageFn = Callable[..., "tuple[Tensor, dict[str, float]]"]
"""``fn(returns [B], group_ids [B], step_traj [N], step_anchor [N] | None, step_rewards [N], **options)``."""

LossTermFn = Callable[..., "Tensor"]
"""``fn(inputs: LossTermInputs, **settings) -> [T]`` per-token values."""

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator", "algo.advantage")
"""``algo.advantage`` → estimator function (see the module docstring for its signature)."""

AuxObjectiveFactory = Callable[..., Any]
"""``factory(cfg, family, settings) -> trainer.auxiliary.AuxObjective`` (see the module docstring)."""

PolicyLossFn = Callable[..., Any]
"""``fn(inputs: LossTermInputs, **options) -> PolicyLossTokens`` (see the module docstring)."""

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss", "algo.policy_loss")
"""``algo.policy_loss`` → the policy-gradient loss function (see the module docstring)."""

POLICY_LOSS_OPTIONS = ("clip_low", "clip_high", "dual_clip")
"""The shared ``algo`` keys a policy loss receives when its signature names them."""

LOSS_TERMS: Registry[LossTermFn] = Registry("loss term", "algo.loss_terms")
"""``algo.loss_terms`` entry → per-token term function (see the module docstring)."""

AUX_OBJECTIVES: Registry[AuxObjectiveFactory] = Registry("auxiliary objective", "algo.aux_objectives")
"""``algo.aux_objectives`` entry → the factory of its run-time object (see the module docstring)."""

RESERVED_LOSS_TERMS = ("pg", "kl", "entropy")
"""Names a loss term or an auxiliary objective may not take: ``policy_loss`` already reports ``pg_loss``,
``kl_loss``, ``entropy_loss``."""

_SECTION_TABLES = (ADVANTAGES, POLICY_LOSSES, LOSS_TERMS, AUX_OBJECTIVES)
"""The tables whose entries may have a section ``algo.<name>``: a name has a section in at most one of them."""


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


@dataclass(frozen=True)
class AuxObjectiveSpec:
    """What the trainer knows about an auxiliary objective before building it, declared when it is registered.

    Attributes:
        name: its name in ``algo.aux_objectives``.
        config: the dataclass of its config section ``algo.<name>`` (has a float field ``coef``).
        check: ``check(cfg)`` raising ``ConfigError`` for a config the objective cannot run (called by
            ``config.validate`` when the objective is listed), or None.
    """

    name: str
    config: type | None = None
    check: Callable[[Any], None] | None = None


def _accepts(fn: Callable[..., Any], names: list[str]) -> list[str]:
    """The ``names`` that ``fn`` cannot take as keyword arguments ([] when it has ``**kwargs``)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [n for n in names if n not in params or params[n].kind is inspect.Parameter.POSITIONAL_ONLY]


def _check_section(kind: str, name: str, fn: Callable[..., Any] | None, config: type | None,
                   skip: tuple[str, ...]) -> None:
    """``config`` is a dataclass whose fields (less ``skip``) ``fn`` takes as keywords (``fn`` None: not checked);
    its name is not taken by a section of another table (all of them live under ``algo.<name>``)."""
    if config is None:
        return
    if not dataclasses.is_dataclass(config):
        raise ValueError(f"{kind} {name!r}: config must be a dataclass type, got {config!r}")
    fields = [f.name for f in dataclasses.fields(config) if f.name not in skip]
    missing = _accepts(fn, fields) if fn is not None else []
    if missing:
        raise ValueError(f"{kind} {name!r}: {getattr(fn, '__name__', fn)!r} does not take the keyword argument(s) "
                         f"{missing} of its config section algo.{name}; add them to its signature")
    for other in _SECTION_TABLES:
        if other.kind != kind and name in other and other.config_class(name) is not None:
            raise ValueError(f"{kind} {name!r}: the {other.kind} {name!r} already has the config section "
                             f"algo.{name}; pick another name")


def _check_coef_section(kind: str, name: str, config: type) -> None:
    """``name`` is not reserved and ``config`` is a dataclass with a field ``coef`` (a loss term's or an auxiliary
    objective's weight)."""
    if name in RESERVED_LOSS_TERMS:
        raise ValueError(f"{kind} name {name!r} is reserved (the policy loss reports {name}_loss); pick another")
    if not dataclasses.is_dataclass(config) or "coef" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"{kind} {name!r}: config must be a dataclass with a float field 'coef' (its weight), "
                         f"got {config!r}")


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


def register_policy_loss(name: str, fn: PolicyLossFn, *, config: type | None = None, advantage_linear: bool = False,
                         doc: str = "", replace: bool = False) -> PolicyLossFn:
    """Register a policy-gradient loss under ``algo.policy_loss = name``; returns ``fn``.

    Args:
        name: the ``algo.policy_loss`` value that chooses it (letters, digits, ``_``, ``-``, ``.``).
        fn: ``fn(inputs: loss.LossTermInputs, **options) -> loss.PolicyLossTokens`` (module docstring); of
            ``clip_low``, ``clip_high``, ``dual_clip`` it receives those it names.
        config: the dataclass of its section ``algo.<name>`` (fields documented with ``empo2.configschema.doc``),
            passed to ``fn`` as keyword arguments; no field may be called ``clip_low``, ``clip_high`` or
            ``dual_clip`` (those are the shared keys).
        advantage_linear: ℓ_t is positively homogeneous in A_t (0 at A_t = 0, ℓ(w·A) = w·ℓ(A) for w > 0; module
            docstring): the learner may then skip zero-advantage trajectories and apply TIS through the advantage.
        doc: one line for listings.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad or taken name (also one an advantage estimator, loss term or auxiliary objective uses);
            ``fn`` not callable or with a required parameter that is neither a shared key nor a field of
            ``config``; ``config`` not a dataclass type, with a field ``fn`` does not take or named like a shared key.
    """
    _check_policy_loss_fn(name, fn, config)
    _check_section("policy loss", name, fn, config, ())
    for other in (ADVANTAGES, LOSS_TERMS, AUX_OBJECTIVES):
        if name in other:
            raise ValueError(f"policy loss {name!r}: the name is taken by the {other.kind} {name!r} (both would read "
                             f"the section algo.{name}); pick another")
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    options = tuple(k for k in POLICY_LOSS_OPTIONS if takes_all or k in params)  # fields cannot shadow these
    return POLICY_LOSSES.register(name, fn, config=config, doc=doc, replace=replace, options=options,
                                  advantage_linear=bool(advantage_linear))


def _check_policy_loss_fn(name: str, fn: Any, config: type | None) -> None:
    """``fn`` is callable and every parameter it requires after ``inputs`` is a shared key or a field of ``config``
    (a dataclass type whose fields do not shadow the shared keys). Raises ValueError."""
    if not callable(fn):
        raise ValueError(f"policy loss {name!r}: fn must be callable (inputs, **options) -> PolicyLossTokens, got "
                         f"{type(fn).__name__}")
    if config is not None and not isinstance(config, type):
        raise ValueError(f"policy loss {name!r}: config must be a dataclass type (the class, not an instance), got "
                         f"{config!r}")
    fields = {f.name for f in dataclasses.fields(config)} if config is not None and dataclasses.is_dataclass(config) \
        else set()
    shadow = sorted(fields & set(POLICY_LOSS_OPTIONS))
    if shadow:
        raise ValueError(f"policy loss {name!r}: its section field(s) {shadow} would hide the shared key(s) "
                         f"{['algo.' + k for k in shadow]}; name the parameter in fn's signature to receive the shared "
                         "value, or rename the field")
    params = list(inspect.signature(fn).parameters.values())[1:]
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    unknown = [n for n in required if n not in POLICY_LOSS_OPTIONS and n not in fields]
    if unknown:
        raise ValueError(f"policy loss {name!r}: {getattr(fn, '__name__', fn)!r} requires {unknown}, which is neither a "
                         f"shared key ({', '.join(POLICY_LOSS_OPTIONS)}) nor a field of its config section; give it a "
                         "default or add it to config")


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
    _check_coef_section("loss term", name, config)
    _check_section("loss term", name, fn, config, ("coef",))
    return LOSS_TERMS.register(name, fn, config=config, doc=doc, replace=replace,
                               needs_entropy_grad=bool(needs_entropy_grad), needs_ref=bool(needs_ref))


def register_aux_objective(name: str, factory: AuxObjectiveFactory, *, config: type,
                           check: Callable[[Any], None] | None = None, doc: str = "",
                           replace: bool = False) -> AuxObjectiveFactory:
    """Register an auxiliary objective under ``name`` (listed in ``algo.aux_objectives``); returns ``factory``.

    Args:
        name: its name in ``algo.aux_objectives``; its section is ``algo.<name>`` and its metrics
            ``train/<name>_loss`` and ``train/<name>_<key>``. Not ``pg``, ``kl`` or ``entropy``.
        factory: ``factory(cfg, family, settings) -> trainer.auxiliary.AuxObjective`` (module docstring), called
            when ``empo2 train`` starts, before the model loads.
        config: the dataclass of its section ``algo.<name>``: a float field ``coef`` (the objective's weight in
            every optimiser step) and its own settings (fields documented with ``empo2.configschema.doc``). Its
            defaults must construct (``empo2 config keys`` lists them); put checks that need the whole config in
            ``check``.
        check: ``check(cfg)`` raising ``ConfigError`` for a config it cannot run (called by ``config.validate``
            when the objective is listed, before any work).
        doc: one line for listings.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad, reserved or taken name; ``config`` not a dataclass or without ``coef``; a section name
            an advantage estimator or a loss term already uses.
    """
    _check_coef_section("auxiliary objective", name, config)
    _check_section("auxiliary objective", name, None, config, ("coef",))
    return AUX_OBJECTIVES.register(name, factory, config=config, doc=doc, replace=replace, check=check)


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


@dataclass(frozen=True)
class PolicyLossSpec:
    """What the trainer knows about a policy loss before calling it, declared when it is registered.

    Attributes:
        name: its ``algo.policy_loss`` name.
        options: the shared keys (of ``clip_low``, ``clip_high``, ``dual_clip``) it receives.
        advantage_linear: ℓ_t is positively homogeneous in A_t (see :func:`register_policy_loss`).
        config: the dataclass of its section ``algo.<name>`` (None: it has none).
    """

    name: str
    options: tuple[str, ...] = ()
    advantage_linear: bool = False
    config: type | None = None


def policy_loss_spec(name: str) -> PolicyLossSpec:
    """What policy loss ``name`` needs and declares, read from its registration (a lazy built-in is not imported).

    Raises:
        ConfigError: ``name`` is not registered (the message lists the registered names).
    """
    meta = POLICY_LOSSES.meta(name)
    return PolicyLossSpec(name, tuple(meta.get("options", ())), bool(meta.get("advantage_linear", False)),
                          POLICY_LOSSES.config_class(name))


def aux_objective_spec(name: str) -> AuxObjectiveSpec:
    """What the trainer knows about auxiliary objective ``name``, read from its registration.

    Raises:
        ConfigError: ``name`` is not registered (the message lists the registered names).
    """
    meta = AUX_OBJECTIVES.meta(name)
    check = meta.get("check")
    return AuxObjectiveSpec(name, AUX_OBJECTIVES.config_class(name), check if callable(check) else None)


ADVANTAGES.register_lazy("grpo", "empo2.algo.advantages:grpo_step_advantages", min_group_size=2,
                         doc="episode-level group-normalised advantage for every step (docs/algorithms.md, GRPO "
                             "advantages)")
ADVANTAGES.register_lazy("gigpo", "empo2.algo.advantages:gigpo_advantages", needs_anchor=True, min_group_size=2,
                         doc="episode advantage + ω · anchor-state step advantage (docs/algorithms.md, GiGPO)")
POLICY_LOSSES.register_lazy("ppo_clip", "empo2.algo.loss:ppo_clip", options=POLICY_LOSS_OPTIONS, advantage_linear=True,
                            doc="PPO's clipped surrogate with dual clip (algo.clip_low, algo.clip_high, algo.dual_clip; "
                                "docs/algorithms.md, Policy loss)")
