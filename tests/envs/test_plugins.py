"""User environments: the ``TextGame`` protocol and its adapter, the one registry (``run.plugins`` and the
``empo2.plugins`` entry points), plug-in config sections, ``empo2 envs check``, and a tiny training run
on the example plug-in under examples/ (no edit of src/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from empo2.cli import main
from empo2.config import config_to_dict, load_config
from empo2.configschema import ConfigError, help_table
from empo2.envs import ENVS, EnvError, Splits, TextGame, register_env
from empo2.envs.base import TaskSpec
from empo2.rollout.envcheck import check_family
from empo2.envs.game import GameFamily
from empo2.envs.registry import make_family
from empo2.registry import Registry, load_plugins
from empo2.rollout.pool import EnvPool
from tests.runcfg import write_config

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "tests.envs.plugins.games"
VAULT = ROOT / "examples" / "vault_env"


def _counter_family(**kw):
    load_plugins([PLUGIN])
    cfg = load_config(None, [f"run.plugins=[{PLUGIN}]", "env.name=counter", "env.tasks=[count]",
                             *[f"{k}={v}" for k, v in kw.items()]])
    return cfg, make_family(cfg.env)


# ---- the registry -------------------------------------------------------------------------------------------
def test_registry_names_lazy_entries_and_refuses_a_taken_name():
    reg: Registry[object] = Registry("thing", "x.name")
    reg.register_lazy("path", "os.path:join", doc="lazy")
    reg.register("one", object(), source="mod_a")
    assert reg.names() == ["one", "path"] and "path" in reg
    import os.path

    assert reg.get("path").obj is os.path.join  # imported on first use
    with pytest.raises(ValueError, match="already registered by mod_a"):
        reg.register("one", object(), source="mod_b")
    reg.register("one", 5, source="mod_b", replace=True)
    assert reg.get("one").obj == 5
    with pytest.raises(ConfigError, match=r"x.name: unknown thing 'onee'.*Did you mean 'one'.*run.plugins"):
        reg.get("onee")
    with pytest.raises(ValueError, match="non-empty word"):
        reg.register("a b", 1)


def test_plugin_modules_that_do_not_import_fail_with_the_fix():
    with pytest.raises(ConfigError, match=r"run.plugins: cannot import 'no_such_pkg.env'.*pip install"):
        load_config(None, ["run.plugins=[no_such_pkg.env]"])
    with pytest.raises(ConfigError, match=r"importing 'tests.envs.plugins.bad_import' raised RuntimeError: this "
                                          r"plug-in is broken on purpose"):
        load_config(None, ["run.plugins=[tests.envs.plugins.bad_import]"])


def test_unknown_environment_names_the_registered_ones_and_the_plugin_route():
    with pytest.raises(ConfigError, match=r"unknown environment 'textworl'.*Did you mean 'textworld'.*run.plugins"):
        load_config(None, ["env.name=textworl"])


def test_register_env_refuses_reserved_names_and_non_dataclass_configs():
    with pytest.raises(ValueError, match="reserved"):
        register_env("tiny", TextGame)
    with pytest.raises(ValueError, match="must be a dataclass"):
        register_env("some_game", TextGame, config=dict)


# ---- plug-in config sections --------------------------------------------------------------------------------
def test_plugin_section_is_typed_listed_saved_and_reloaded(tmp_path):
    cfg, fam = _counter_family(**{"env.counter.target": 5})
    assert cfg.env.counter.target == 5 and fam.make().game.config.target == 5
    keys = [k for k, _, _ in help_table(type(cfg))]
    assert "env.counter.target" in keys and "run.plugins" in keys
    with pytest.raises(ConfigError, match=r"unknown config key 'env.counter.targt'.*Did you mean 'target'"):
        load_config(None, [f"run.plugins=[{PLUGIN}]", "env.name=counter", "env.counter.targt=2"])
    with pytest.raises(ConfigError, match="env.counter.target must be >= 1"):
        load_config(None, [f"run.plugins=[{PLUGIN}]", "env.name=counter", "env.counter.target=0"])
    saved = tmp_path / "config.yaml"
    import yaml

    saved.write_text(yaml.safe_dump(config_to_dict(cfg)))
    again = load_config(saved)
    assert again.env.counter.target == 5 and again.run.plugins == [PLUGIN]
    assert config_to_dict(again) == config_to_dict(cfg)


def test_config_keys_command_lists_a_plugin_section(capsys):
    load_plugins([PLUGIN])
    assert main(["config", "keys"]) == 0
    assert "env.counter.target" in capsys.readouterr().out


def test_config_keys_and_registries_load_the_plugins_an_override_names(capsys):
    """``empo2 config keys run.plugins=[…]`` / ``config registries`` import the plug-in first, so a user sees its
    section and its name without editing anything; a bad plug-in name is the same one-line error as in train."""
    assert main(["config", "keys", f"run.plugins=[{PLUGIN}]"]) == 0
    assert "env.counter.target" in capsys.readouterr().out
    assert main(["config", "registries", f"run.plugins=[{PLUGIN}]"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for key in ("env.name:", "trainer.method:", "algo.advantage:", "rollout.generator:"):
        assert key in lines
    assert any(ln.split()[:2] == ["counter", f"[{PLUGIN}]"] for ln in lines), out
    assert any(ln.split()[:1] == ["textworld"] for ln in lines) and any(ln.split()[:1] == ["gigpo"] for ln in lines)
    assert main(["config", "registries", "run.plugins=[no_such_plugin_mod]"]) == 2
    assert "PYTHONPATH" in capsys.readouterr().err


def test_a_plugin_that_registers_nothing_is_reported_and_a_bad_name_is_refused(tmp_path, monkeypatch, caplog):
    """Naming a package folder whose __init__ does not import the registering module used to pass silently, and
    the later "unknown environment" error then said to add it to run.plugins — where it already was."""
    (tmp_path / "registers_nothing_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level("WARNING", logger="empo2.registry"):
        load_plugins(["registers_nothing_mod"])
    assert "'registers_nothing_mod' registered nothing" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="empo2.registry"):
        load_plugins([PLUGIN])  # registers (or registered already): no warning
    assert "registered nothing" not in caplog.text
    with pytest.raises(ConfigError, match="'.' is not a module name"):
        load_plugins(["."])


def test_entry_point_plugins_are_imported_without_run_plugins(tmp_path):
    """A package declaring an ``empo2.plugins`` entry point registers its environment in a fresh process."""
    mod = tmp_path / "ep_demo_env.py"
    mod.write_text("from empo2.envs import Splits, TextGame, register_env\n"
                   "class G(TextGame):\n    tasks = {'t': Splits(train=[0])}\n"
                   "register_env('ep_demo', G)\n")
    dist = tmp_path / "ep_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[empo2.plugins]\nep_demo = ep_demo_env\n")
    code = ("from empo2.config import load_config; c = load_config(None, ['env.name=ep_demo', 'env.tasks=[t]']); "
            "print(c.env.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ep_demo"


# ---- the adapter --------------------------------------------------------------------------------------------
def test_adapter_scales_scores_and_reports_success():
    _, fam = _counter_family()
    env = fam.make()
    ob = env.reset(TaskSpec("counter", "count", 1))
    assert ob.task_description == "count to 4 and stop" and ob.score == 0.0
    scores = [env.step(a) for a in ["up", "up", "up", "up", "stop"]]
    assert [round(r.score, 1) for r in scores] == [20.0, 40.0, 60.0, 80.0, 100.0]
    assert scores[-1].done and scores[-1].success and abs(sum(r.reward for r in scores) - 100.0) < 1e-9
    again = env.step("up")  # after done: the last result again, no change
    assert again.done and again.score == 100.0 and again.reward == 0.0
    refused = fam.make()
    refused.reset(TaskSpec("counter", "count", 0))
    r = refused.step("dance")
    assert not r.valid and r.refused and r.score == 0.0
    assert env.gold_path(TaskSpec("counter", "count", 0)) == ["up", "up", "up", "stop"]
    assert fam.resolve_task("1") == "count" and fam.variations("count", "test") == [9, 10]


class _Raises(TextGame):
    tasks = {"t": Splits(train=[0])}

    def reset(self, task, seed):
        return "start", {}

    def step(self, action):
        raise KeyError("boom")


class _BadTypes(TextGame):
    tasks = {"t": Splits(train=[0])}

    def reset(self, task, seed):
        return "start", {"max_score": 0}

    def step(self, action):
        return "x", float("nan"), False, {}


def test_adapter_turns_game_errors_and_protocol_breaks_into_env_errors():
    env = GameFamily("r", _Raises).make()
    env.reset(TaskSpec("r", "t", 0))
    with pytest.raises(EnvError, match=r"_Raises.step raised KeyError"):
        env.step("go")
    with pytest.raises(EnvError, match="does not report info\\['admissible_actions'\\].*action.mode=free"):
        env.admissible_actions()
    bad = GameFamily("b", _BadTypes).make()
    with pytest.raises(EnvError, match=r"max_score.*finite number > 0"):
        bad.reset(TaskSpec("b", "t", 0))
    with pytest.raises(TypeError, match="not a subclass of empo2.envs.TextGame"):
        GameFamily("x", object)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="both Splits.train and Splits.test"):
        Splits(train=[0, 1], test=[1])


def test_a_crashing_game_marks_the_episode_and_the_pool_restarts_it():
    fam = GameFamily("r", _Raises)
    with EnvPool(fam, 2) as pool:
        pool.reset_many([0, 1], [TaskSpec("r", "t", 0)] * 2)
        res = pool.step_many([0, 1], ["go", "go"])
        assert all(isinstance(r, EnvError) for r in res)
        pool.restart(0)
        assert pool.reset_many([0], [TaskSpec("r", "t", 0)])[0].text == "start"


# ---- envs check ---------------------------------------------------------------------------------------------
def test_envs_check_passes_a_good_plugin_and_fails_a_broken_one(capsys):
    _, fam = _counter_family()
    verdicts = {v.rule: v for v in check_family(fam, ["count"])}
    assert all(v.status == "pass" for v in verdicts.values()), verdicts
    assert main(["envs", "check", "counter", f"run.plugins=[{PLUGIN}]"]) == 0
    assert "counter passes the environment contract" in capsys.readouterr().out
    assert main(["envs", "check", "broken", f"run.plugins=[{PLUGIN}]"]) == 1
    out = capsys.readouterr().out
    assert "3 rule(s) failed" in out, out
    bad = {v.rule: v for v in check_family(make_family(load_config(None, [
        f"run.plugins=[{PLUGIN}]", "env.name=broken"]).env), ["broken"])}
    assert bad["reset"].status == "fail" and "deterministic" in bad["reset"].detail
    assert bad["steps"].status == "fail" and "reward" in bad["steps"].detail
    assert bad["admissible"].status == "fail" and "admissible action refused" in bad["admissible"].detail
    assert bad["crash recovery"].status == "pass" and bad["odd actions"].status == "pass"


def test_envs_check_usage_errors(capsys):
    assert main(["envs", "check"]) == 2
    assert main(["envs", "check", "nope"]) == 2
    assert "unknown environment 'nope'" in capsys.readouterr().out


# ---- the example plug-in, trained through the CLI -----------------------------------------------------------
@pytest.fixture
def vault_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(VAULT))
    yield
    sys.modules.pop("empo2_vault", None)


def test_example_plugin_passes_envs_check(vault_on_path):
    cfg = load_config(None, ["run.plugins=[empo2_vault]", "env.name=vault", "env.tasks=[open-vault]"])
    assert all(v.status == "pass" for v in check_family(make_family(cfg.env), ["open-vault"]))
    assert "empo2_vault" in ENVS.get("vault").source


@pytest.mark.parametrize("p", [0.0, 1.0], ids=["grpo", "empo2"])
def test_example_plugin_trains_one_iteration_through_the_cli(tmp_path, vault_on_path, p):
    base = {
        "run": {"plugins": ["empo2_vault"]},
        "model": {"name_or_path": "tiny-random"},
        "env": {"name": "vault", "tasks": ["open-vault"], "max_turns": 4, "num_workers": 2,
                "vault": {"n_drawers": 3}},
        "action": {"mode": "constrained", "max_new_tokens": 6},
        "rollout": {"tasks_per_iteration": 2, "group_size": 2},
        "empo2": {"p": p, "memory": {"embedder": "hashing"}},
        "eval": {"episodes": 2, "before_after": False},
        "trainer": {"iterations": 1, "lr": 1.0e-3, "tensorboard": False},
    }
    path = write_config(tmp_path, base, f"vault_{p}")
    import yaml

    data = yaml.safe_load(path.read_text())
    data["run"]["plugins"] = ["empo2_vault"]
    path.write_text(yaml.safe_dump(data))
    assert main(["train", "--config", str(path)]) == 0
    run = tmp_path / "runs" / f"vault_{p}"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["iteration"] == 1 and "rollout/success_rate" in rows[0]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["run"]["plugins"] == ["empo2_vault"] and saved["env"]["vault"] == {"n_drawers": 3}
    traj = (run / "trajectories" / "iter-00001.jsonl").read_text().splitlines()
    recs = [json.loads(t) for t in traj]
    assert len(recs) == 4 and {r["task"] for r in recs} == {"open-vault"}
    assert all(r["steps"] and not r["crashed"] for r in recs)
    if p > 0:  # EMPO²: every rollout memory-augmented, a tip written per episode
        assert all(r["mode"] != "plain" for r in recs) and all(isinstance(r["tip"], str) for r in recs)


class _NeedsJava(TextGame):
    tasks = {"t": Splits(train=[0])}
    calls = 0

    @classmethod
    def preflight(cls, config):
        cls.calls += 1
        raise EnvError("java is not on PATH; install Java 17 (e.g. apt install openjdk-17-jre-headless)")


def test_preflight_fails_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """A family's preflight runs in setup before load_policy: its error ends the run with the fix."""
    import empo2.trainer.setup as setup_mod

    register_env("needs_java", _NeedsJava, replace=True)

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the preflight check")

    monkeypatch.setattr(setup_mod, "load_policy", no_model)
    base = {"model": {"name_or_path": "tiny-random"}, "env": {"name": "needs_java", "tasks": ["t"], "max_turns": 2},
            "rollout": {"tasks_per_iteration": 1, "group_size": 2}, "eval": {"episodes": 1, "before_after": False},
            "trainer": {"iterations": 1, "tensorboard": False}}
    path = write_config(tmp_path, base, "pf")
    assert main(["train", "--config", str(path)]) != 0
    assert _NeedsJava.calls == 1
    assert "install Java 17" in capsys.readouterr().err


class _Hangs(TextGame):
    tasks = {"t": Splits(train=[0])}
    call_timeout_s = 0.3

    def reset(self, task, seed):
        return "start", {}

    def step(self, action):
        import time

        time.sleep(2.0)
        return "late", 0.0, False, {}


def test_a_hung_game_call_becomes_an_env_error_after_its_timeout():
    import time

    env = GameFamily("h", _Hangs).make()
    env.reset(TaskSpec("h", "t", 0))
    t0 = time.perf_counter()
    with pytest.raises(EnvError, match=r"_Hangs.step did not answer within 0.3 s"):
        env.step("wait")
    assert time.perf_counter() - t0 < 1.5
    env.close()


class _HiddenRandom(TextGame):
    """The first observation is fixed but reset draws hidden state without the seed."""

    tasks = {"t": Splits(train=[0, 1], test=[2])}

    def reset(self, task, seed):
        import random

        self.secret = random.random()
        return "a closed box", {"admissible_actions": ["open box"]}

    def step(self, action):
        return f"the box holds {self.secret:.6f}", 0.0, False, {"admissible_actions": ["open box"]}


def test_envs_check_catches_hidden_randomness_behind_the_same_first_observation():
    verdicts = {v.rule: v for v in check_family(GameFamily("hidden", _HiddenRandom), ["t"])}
    assert verdicts["reset"].status == "fail"
    assert "the same actions from the same reset gave different replies" in verdicts["reset"].detail


def test_envs_listing_suggests_the_name_meant(capsys):
    assert main(["envs", "textwrold"]) == 2
    assert "Did you mean 'textworld'" in capsys.readouterr().err
