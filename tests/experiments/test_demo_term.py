"""The demonstration term under experiments/ (``experiments/demo_term``, PPO-ptx; formerly ``algo.sft_coef``): an
auxiliary objective that adds λ_SFT · (token-mean NLL of ``algo.sft.episodes`` demonstrations) to every optimiser
step. Checked exactly on the gradients the optimiser sees (with all-zero advantages the step's gradient is λ_SFT × the
NLL gradient computed by hand; with an RL signal it is the RL gradient plus that), trained through the real CLI with
``run.plugins`` (``train/sft_nll`` reported every iteration and falling), its config checks, its data failing before
the model loads, and the removed package keys naming it. The plug-in imports only empo2's public API."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from empo2.cli import USER_ERROR, main
from empo2.config import TrainerConfig, load_config
from empo2.configschema import ConfigError
from empo2.trainer.auxiliary import AuxTerm
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner
from experiments.demo_term import DEMO_TERM, DemoTerm, DemoTermConfig, term_demos
from tests.faults.common import TINY
from tests.runcfg import write_config

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ["run.plugins=[experiments.demo_term]", "algo.aux_objectives=[sft]"]
TINY_KEYS = ["env.name=tiny", "env.tasks=[fetch-key]"]


def _write(tmp_path: Path, base: dict, name: str, plugins: list[str]) -> Path:
    """``write_config`` with ``run.plugins`` (it writes the ``run`` section itself)."""
    cfg = write_config(tmp_path, base, name)
    data = yaml.safe_load(cfg.read_text())
    data["run"]["plugins"] = plugins
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def _rl_samples(adv: float) -> list[PackedSample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i, (length, first) in enumerate([(24, 6), (36, 8)]):
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(first, length - 2))
        n = len(cols)
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=(-7.5 - 0.6 * torch.rand(n, generator=g)).tolist(),
                                advantages=[adv if i == 0 else -adv] * n, allowed=[None] * n,
                                seq_ids=[i] * n, traj=i))
    return out


def _demos() -> list[PackedSample]:
    g = torch.Generator().manual_seed(2)
    out = []
    for i, (length, first) in enumerate([(20, 10), (28, 15), (16, 4)]):
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(first, length))
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=[0.0] * len(cols), advantages=[1.0] * len(cols),
                                allowed=[None] * len(cols), seq_ids=[100 + i] * len(cols), traj=100 + i))
    return out


def _term(coef: float, samples: list[PackedSample]) -> list[AuxTerm]:
    """The term as the trainer holds it, on packed samples (the records and ``prepare`` are tested below)."""
    term = DemoTerm(load_config(None, TINY_KEYS), DemoTermConfig(coef=coef, data=["gold"], episodes=3), [])
    term.samples = samples
    return [AuxTerm(DEMO_TERM, coef, term)]


def _step_grads(model, adv: float, coef: float, demos=None) -> tuple[dict, dict[str, torch.Tensor]]:
    """One update of one mini-batch; the gradients the optimiser stepped with (by parameter name)."""
    from empo2.config import AlgoConfig

    m = copy.deepcopy(model).float()
    trainer = TrainerConfig(lr=1e-3, micro_batch_tokens=48, logprob_chunk=8, tensorboard=False, grad_clip=0.0,
                            mini_batch_size=0, measure_policy_kl=False)
    learner = Learner(m, AlgoConfig(), trainer, 0.8, pad_id=0, aux_objectives=_term(coef, demos) if coef else None)
    grads: dict[str, torch.Tensor] = {}

    def record(*a, **k):
        grads.update({n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None})

    learner.optimizer.step = record  # type: ignore[method-assign]
    return learner.update(_rl_samples(adv)), grads


def _nll_grads(model, demos: list[PackedSample], coef: float) -> tuple[float, dict[str, torch.Tensor]]:
    """λ · token-mean NLL of all the demonstrations at temperature 1, by hand (one padded forward)."""
    m = copy.deepcopy(model).float()
    L = max(len(d.ids) for d in demos)
    ids = torch.zeros(len(demos), L, dtype=torch.long)
    att = torch.zeros(len(demos), L, dtype=torch.long)
    for r, d in enumerate(demos):
        ids[r, :len(d.ids)] = torch.tensor(d.ids)
        att[r, :len(d.ids)] = 1
    logits = m(input_ids=ids, attention_mask=att).logits.float()
    logp = torch.log_softmax(logits, -1)
    terms = [logp[r, c - 1, d.ids[c]] for r, d in enumerate(demos) for c in d.cols]
    nll = -torch.stack(terms).mean()
    (coef * nll).backward()
    return float(nll.detach()), {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}


# ---- the term's gradient --------------------------------------------------------------------------------------------
def test_zero_advantages_step_on_the_demonstration_term_alone(tiny_policy):
    demos = _demos()
    out0, g0 = _step_grads(tiny_policy.model, 0.0, 0.0)
    assert out0["train/optimizer_steps"] == 0.0 and not g0  # no signal, no term: no step at all
    out, got = _step_grads(tiny_policy.model, 0.0, 0.5, demos)
    nll, want = _nll_grads(tiny_policy.model, demos, 0.5)
    assert out["train/optimizer_steps"] == 1.0
    assert out["train/sft_nll"] == pytest.approx(nll, rel=1e-4)
    assert out["train/sft_loss"] == pytest.approx(0.5 * nll, rel=1e-4)
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=2e-6, rtol=1e-4)


def test_the_term_adds_to_the_rl_gradient(tiny_policy):
    demos = _demos()
    _, rl = _step_grads(tiny_policy.model, 1.0, 0.0)
    out, both = _step_grads(tiny_policy.model, 1.0, 0.25, demos)
    _, sft = _nll_grads(tiny_policy.model, demos, 0.25)
    assert out["train/optimizer_steps"] == 1.0 and "train/loss" in out
    moved = max(float(sft[k].abs().max()) for k in sft)
    assert moved > 1e-6
    for k in both:
        torch.testing.assert_close(both[k], rl[k] + sft[k], atol=2e-6, rtol=1e-4)


def test_the_term_runs_in_one_process_only(tiny_policy):
    from empo2.config import AlgoConfig
    from empo2.distributed import DistContext

    with pytest.raises(ValueError, match="one process"):
        Learner(tiny_policy.model, AlgoConfig(), TrainerConfig(tensorboard=False), 1.0, pad_id=0,
                aux_objectives=_term(0.1, _demos()), dist=DistContext(rank=0, world=2))


# ---- config ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, match", [
    ([*PLUGIN], "needs demonstrations: set algo.sft.data"),
    ([*PLUGIN, "algo.sft.data=[gold]", "trainer.strategy=ddp"], "trainer.strategy=single"),
    ([*PLUGIN, "algo.sft.data=[gold]", "trainer.update=false"], "memory-only"),
    ([*PLUGIN, "algo.sft.coef=0", "algo.sft.data=[gold]"], "algo.sft.coef"),
    ([*PLUGIN, "algo.sft.coef=-1", "algo.sft.data=[gold]"], "algo.sft.coef"),
    ([*PLUGIN, "algo.sft.data=[gold]", "algo.sft.episodes=0"], "algo.sft.episodes"),
    (["run.plugins=[experiments.demo_term]", "algo.sft.data=[gold]"], "add it to algo.aux_objectives"),
])
def test_bad_term_settings_fail_before_any_work(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [*TINY_KEYS, *overrides])


def test_the_removed_keys_name_the_plugin_and_old_defaults_still_load(tmp_path, capsys):
    """``algo.sft_coef`` / ``sft_data`` / ``sft_episodes`` left the package: set, they fail before work with one line
    naming the plug-in; at their defaults (the ``config.yaml`` of every run saved before) they are still read."""
    for over in (["algo.sft_coef=1.0", "algo.sft_data=[gold]"], ["algo.sft_data=[gold]"], ["algo.sft_episodes=2"]):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*TINY_KEYS, *over])
        msg = str(e.value)
        assert "\n" not in msg and "experiments/demo_term" in msg and "run.plugins=[experiments.demo_term]" in msg
        assert "algo.aux_objectives=[sft]" in msg and "algo.sft.coef" in msg
    cfg = load_config(None, [*TINY_KEYS, "algo.sft_coef=0", "algo.sft_data=[]", "algo.sft_episodes=4"])
    assert cfg.algo.aux_objectives == []
    old = write_config(tmp_path, TINY, "old", algo={"sft_coef": 1.0, "sft_data": ["gold"]})
    assert main(["train", "--config", str(old)]) == USER_ERROR
    assert "algo.sft_coef=1.0: algo.sft_coef, algo.sft_data and algo.sft_episodes moved to experiments/demo_term" \
        in capsys.readouterr().err
    assert not (tmp_path / "runs" / "old").exists()


def test_without_its_plugin_the_objective_is_unknown_with_the_fix_and_with_it_light():
    code = ("from empo2.config import load_config\ntry:\n    load_config(None, ['algo.aux_objectives=[sft]'])\n"
            "except ValueError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": str(REPO / "src")},
                         capture_output=True, text=True, timeout=120)  # a fresh process: this one loaded the plug-in
    assert "unknown auxiliary objective 'sft'" in out.stdout and "run.plugins" in out.stdout, out.stderr
    # with it, a config error still comes before any heavy import: loading the plug-in imports no torch
    code = (f"import sys\nfrom empo2.cli import main\nrc = main(['train', '--config', 'configs/tiny.yaml', *{PLUGIN!r}])"
            "\nprint('RESULT', rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": f"{REPO / 'src'}:{REPO}"},
                         capture_output=True, text=True, timeout=120)
    assert "RESULT 2 False" in out.stdout and "algo.sft.data" in out.stderr, (out.stdout, out.stderr)


# ---- through the CLI ------------------------------------------------------------------------------------------------
def test_train_with_gold_tip_demonstrations_logs_the_term_and_lowers_its_nll(tmp_path, tiny_policy):
    """The plug-in acted: ``train/sft_nll`` / ``train/sft_loss`` in every iteration's row, a step in every iteration
    (with or without an RL signal), the NLL falling; its demonstrations come from the gold_tips plug-in's source."""
    base = copy.deepcopy(TINY)
    base["env"]["variations"] = [0, 1]
    base["trainer"].update(iterations=3, lr=5.0e-3)
    base["algo"] = {"aux_objectives": [DEMO_TERM], DEMO_TERM: {"coef": 1.0, "data": ["gold_tips"], "episodes": 2}}
    cfg = _write(tmp_path, base, "ptx", ["experiments.demo_term", "experiments.gold_tips"])
    assert main(["train", "--config", str(cfg)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "runs" / "ptx" / "metrics.jsonl").read_text().splitlines()]
    nll = [r["train/sft_nll"] for r in rows if "train/sft_nll" in r]
    assert len(nll) == 3  # every iteration steps, with or without an RL signal
    assert all(r["train/optimizer_steps"] >= 1 for r in rows)
    assert all(r["train/sft_loss"] == pytest.approx(r["train/sft_nll"]) for r in rows)  # coef 1
    assert nll[-1] < nll[0]
    saved = yaml.safe_load((tmp_path / "runs" / "ptx" / "config.yaml").read_text())
    assert saved["algo"]["aux_objectives"] == ["sft"] and saved["algo"]["sft"]["data"] == ["gold_tips"]


def test_a_missing_or_bad_demonstration_file_fails_at_train_time_before_the_model(tmp_path, tiny_policy, monkeypatch):
    """The config itself loads (eval/export of a checkpoint whose demonstration file has gone must work); ``empo2
    train`` fails with exit 2 naming ``algo.sft.data`` before any model or run folder; malformed rows name the
    episode; demonstrations cut entirely by model.max_context are a ConfigError, not a traceback."""
    from empo2.envs.tiny.env import TinyFamily
    from empo2.policy.chat import ChatFormat
    from empo2.trainer import loop
    from empo2.trajfile import TrajectoryFileError

    over = [*TINY_KEYS, *PLUGIN, "algo.sft.coef=0.1"]

    def demos(extra):
        cfg = load_config(None, [*over, *extra])
        return term_demos(cfg, TinyFamily(), cfg.algo.sft)

    load_config(None, [*over, "algo.sft.data=[no/such/file.jsonl]"])  # no file check in the config
    with pytest.raises(ConfigError, match=r"algo.sft.data: 'no/such/file.jsonl' is neither"):
        demos(["algo.sft.data=[no/such/file.jsonl]"])

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the demonstrations were checked")

    monkeypatch.setattr(loop, "build_setup", no_model)
    base = copy.deepcopy(TINY)
    base["algo"] = {"aux_objectives": [DEMO_TERM], DEMO_TERM: {"coef": 1.0, "data": [str(tmp_path / "gone.jsonl")]}}
    cfg = _write(tmp_path, base, "missing", ["experiments.demo_term"])
    assert main(["train", "--config", str(cfg)]) == 2
    assert not (tmp_path / "runs" / "missing").exists()

    good = {"task": "fetch-key", "variation": 0, "task_description": "t", "score": 100,
            "steps": [{"observation": "o", "action": "go east"}]}
    for bad, match in [({**good, "score": "high"}, "'score' must be a finite number"),
                       ({**good, "steps": [{"observation": "o", "action": 3}]}, "must be strings"),
                       ({**good, "steps": "go east"}, "'steps' must be a list"),
                       ([1, 2], "not a JSON object"),
                       ({**good, "variation": "abc"}, "'variation' must be an integer"),
                       ({**good, "task_description": 42}, "'task_description' must be a string"),
                       ({**good, "initial_score": "x"}, "'initial_score' must be a finite number"),
                       ({**good, "score": float("nan")}, "'score' must be a finite number"),
                       ({**good, "steps": [{"observation": "o", "action": "go", "score": "x"}]}, "step 0: 'score'"),
                       ({**good, "steps": [{"observation": "o", "action": "go", "valid": "false"}]}, "'valid'"),
                       ({**good, "steps": [{"observation": "o", "action": "go", "tips": "abc"}]}, "list of strings"),
                       ({**good, "steps": [{"observation": "o", "action": "  "}]}, "'action' is empty")]:
        f = tmp_path / "bad.jsonl"
        f.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(TrajectoryFileError, match=rf"algo.sft.data .*bad.jsonl episode 2: .*{match}"):
            demos([f"algo.sft.data=[{f}]"])

    f = tmp_path / "binary.jsonl"
    f.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(TrajectoryFileError, match="algo.sft.data: .*not UTF-8"):
        demos([f"algo.sft.data=[{f}]"])
    f = tmp_path / "empty.jsonl"
    f.write_text("\n")
    with pytest.raises(ConfigError, match="empty.jsonl: 0 episodes"):
        demos([f"algo.sft.data=[{f}]"])
    f.write_text(json.dumps({**good, "steps": []}) + "\n" + json.dumps({**good, "score": 0}) + "\n")
    with pytest.raises(ConfigError, match="2 episodes, 1 crashed or without steps, 1 below sft.min_score"):
        demos([f"algo.sft.data=[{f}]"])

    f = tmp_path / "good.jsonl"
    f.write_text(json.dumps(good) + "\n")
    small = [f"algo.sft.data=[{f}]", "model.max_context=64", "action.max_new_tokens=8", "empo2.tips.max_new_tokens=8"]
    cfg_small = load_config(None, [*over, *small])
    records = demos(small)
    assert len(records) == 1
    term = DemoTerm(cfg_small, cfg_small.algo.sft, records)
    with pytest.raises(ConfigError, match="model.max_context=64"):
        term.prepare(SimpleNamespace(fmt=ChatFormat(tiny_policy.tokenizer), family=TinyFamily()))
