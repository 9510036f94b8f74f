"""Retrospex as a plug-in (``experiments/retrospex``; experiments/README.md): the action selector ``retrospex`` and its
section ``action.retrospex`` through the public registry, the checks it makes before any work, and the package's
removed section, option and command naming their replacement in one line (the section at its old defaults, as in the
``config.yaml`` of every run saved before, still read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from empo2.cli import USER_ERROR, main
from empo2.config import RETROSPEX_OLD_DEFAULTS, config_from_dict, config_to_dict, load_config
from empo2.configschema import ConfigError, set_dotted
from empo2.selectors import SELECTORS
from experiments.retrospex import NAME, RetrospexConfig
from experiments.retrospex.config import RANGES
from experiments.retrospex.selector import CRITIC_DIR_MISSING
from tests.runcfg import write_config

REPO = Path(__file__).resolve().parents[3]
PLUGIN = "run.plugins=[experiments.retrospex]"
TINY = ["env.name=tiny", "env.tasks=[fetch-key]"]
BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 4},
    "eval": {"episodes": 2},
    "trainer": {"iterations": 1, "threads": 1, "tensorboard": False},
}


def _old_section() -> dict:
    """The ``retrospex`` section every ``config.yaml`` saved before the move holds (its defaults)."""
    sec: dict = {}
    for key, value in RETROSPEX_OLD_DEFAULTS.items():
        set_dotted(sec, key, value)
    return sec


def test_the_section_holds_the_old_keys_with_the_same_defaults_and_bounds():
    cfg = load_config(None, [*TINY, PLUGIN, "action.retrospex.k=6", "action.retrospex.critic.epochs=3"])
    sec = cfg.action.retrospex
    assert isinstance(sec, RetrospexConfig) and sec.k == 6 and sec.critic.epochs == 3 and sec.critic_dir == ""
    saved = config_to_dict(cfg)["action"]["retrospex"]
    flat = {k: v for k, v in _flatten(saved).items() if k != "critic_dir"}
    assert flat == {**RETROSPEX_OLD_DEFAULTS, "k": 6, "critic.epochs": 3}  # the old keys, the old defaults
    assert SELECTORS.plugin_modules(NAME) == ["experiments.retrospex"]
    for key, value, words in (("k", 2000, "action.retrospex.k = 2000 is out of range; it must be a number in "
                                          "[1, 1024]"),
                              ("critic.seed", -1, "action.retrospex.critic.seed = -1 is out of range"),
                              ("d", 0, "action.retrospex.d must be in (0, 1]")):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*TINY, PLUGIN, f"action.retrospex.{key}={value}"])
        assert words in str(e.value)
    assert set(RANGES) <= {k for k in RETROSPEX_OLD_DEFAULTS}


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_an_old_runs_retrospex_section_at_its_defaults_is_read_and_any_other_names_the_plugin(tmp_path, capsys):
    cfg = config_from_dict({"env": {"name": "tiny", "tasks": ["fetch-key"]}, "retrospex": _old_section()})
    assert cfg.action.selector == "policy" and "retrospex" not in config_to_dict(cfg)
    assert config_from_dict({"env": {"name": "tiny", "tasks": ["fetch-key"]}, "retrospex": {"critic": {}}})
    for override in ("retrospex.k=6", "retrospex.critic.encoder=minilm", "retrospex.critic_dir=x"):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*TINY, override])
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(override.split("=")[0])
        assert "action.retrospex" in msg and "run.plugins=[experiments.retrospex]" in msg
        assert "python -m experiments.retrospex" in msg
    cfg_file = write_config(tmp_path, BASE, "old", retrospex={"k": 6})
    assert main(["train", "--config", str(cfg_file)]) == USER_ERROR
    err = capsys.readouterr().err
    assert "retrospex.k=6: the retrospex section moved to experiments/retrospex" in err and err.count("\n") == 1
    assert not (tmp_path / "runs" / "old").exists()


def test_a_saved_runs_retrospex_settings_are_dropped_with_a_warning_so_the_run_stays_readable(tmp_path, caplog):
    """A run saved before the move with the old section set (``k: 6``) resumes / evaluates: its saved config
    (``saved=True``: ``--resume RUN``, ``eval --checkpoint``, ``export``) drops the section with one warning per key
    naming the replacement; the same section in a new config stays an error."""
    data = {"env": {"name": "tiny", "tasks": ["fetch-key"]}, "retrospex": {"k": 6, "critic": {"batch": 16}}}
    with pytest.raises(ConfigError, match="retrospex.k=6: the retrospex section moved"):
        config_from_dict(data)
    with caplog.at_level("WARNING", logger="empo2.config"):
        cfg = config_from_dict(data, saved=True)
    assert "retrospex" not in config_to_dict(cfg) and cfg.action.selector == "policy"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("ignored in this saved run's config.yaml" in w for w in warned)
    assert warned[0].startswith("retrospex.k=6") and warned[1].startswith("retrospex.critic.batch=16")


def test_the_removed_option_and_command_name_their_replacement(tmp_path, capsys):
    ckpt = str(tmp_path / "runs" / "x" / "checkpoints" / "last")
    assert main(["eval", "--checkpoint", ckpt, "--retrospex", "runs/x/critic"]) == USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("'run.plugins=[experiments.retrospex]' action.selector=retrospex "
                                     "action.retrospex.critic_dir=runs/x/critic") in err
    assert main(["adapt", "--checkpoint", ckpt, "--tasks", "fetch-key", "--retrospex", "C", "a=1"]) == USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "action.selector=retrospex action.retrospex.critic_dir=C" in err
    for argv in (["retrospex", "pipeline", "--config", "c.yaml", "a=1"], ["retrospex", "collect", "--checkpoint", ckpt],
                 ["retrospex", "critic", "--data", "d", "--out", "o"], ["retrospex", "--help"], ["retrospex"]):
        assert main(argv) == USER_ERROR, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "python -m experiments.retrospex collect|critic|pipeline" in err, argv


def test_a_near_miss_of_the_removed_option_or_command_is_pointed_at_its_replacement_not_at_it(capsys):
    """``--retro`` (an unknown option) was answered "did you mean --retrospex?", the removed option, hidden from the
    help, that only fails; now a removed option or command is never suggested: the one closest to it names what
    replaced it, and a hidden option is never named."""
    from empo2.cli import unrecognized_message
    from empo2.cli.moved import RETROSPEX_OPTION_NOW

    for argv in (["eval", "--checkpoint", "c", "--retro", "x"], ["adapt", "--retro", "x"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "did you mean --retrospex" not in err, argv
        assert f"--retro (--retrospex was removed; use {RETROSPEX_OPTION_NOW})" in err, argv
        assert err.strip().splitlines()[-1].count("error:") == 1
    assert "action.selector=retrospex action.retrospex.critic_dir=CRITIC" in RETROSPEX_OPTION_NOW
    with pytest.raises(SystemExit):
        main(["eval", "--checkpoint", "c", "--episode", "3"])  # a shown option is still suggested as it was
    assert "--episode (did you mean --episodes?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["retro"])
    err = capsys.readouterr().err
    assert err.strip() == ("empo2: error: unknown command 'retro'; did you mean python -m experiments.retrospex "
                           "(formerly empo2 retrospex)?")
    import argparse

    hidden = argparse.ArgumentParser()
    hidden.add_argument("--internal-knob", help=argparse.SUPPRESS)
    assert unrecognized_message(["--internal-knb"], hidden) == "unrecognized arguments: --internal-knb"


def test_eval_with_the_selector_checks_its_critic_before_the_model_loads(tmp_path, capsys):
    cfg = write_config(tmp_path, BASE, "rx")
    out = tmp_path / "e.json"
    base = ["eval", "--config", str(cfg), "--out", str(out), PLUGIN, "action.selector=retrospex"]
    assert main(base) == USER_ERROR
    assert capsys.readouterr().err.strip() == f"error: {CRITIC_DIR_MISSING}"
    (tmp_path / "notacritic").mkdir()
    assert main([*base, f"action.retrospex.critic_dir={tmp_path / 'notacritic'}"]) == USER_ERROR
    assert "is not a critic folder" in capsys.readouterr().err
    critic = tmp_path / "critic"
    critic.mkdir()
    (critic / "critic.yaml").write_text("env: scienceworld\n")
    (critic / "critic.pt").write_bytes(b"")
    assert main([*base, f"action.retrospex.critic_dir={critic}"]) == USER_ERROR
    assert "trained on 'scienceworld' data, but env.name is 'tiny'" in capsys.readouterr().err
    assert not out.exists()
    assert main(["train", "--config", str(cfg), PLUGIN, "action.selector=retrospex"]) == USER_ERROR
    assert "action.selector=retrospex: empo2 train samples every action" in capsys.readouterr().err
    assert main(["sft", "--config", str(cfg), PLUGIN, "action.selector=retrospex", "sft.data=[gold]"]) == USER_ERROR
    assert "action.selector=retrospex: empo2 sft samples every action" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "rx").exists()


def test_without_the_plugin_the_selector_is_unknown_and_loading_it_imports_no_torch():
    code = ("from empo2.config import load_config\n"
            "for ov in (['action.selector=retrospex'], ['action.retrospex.k=3']):\n"
            "    try:\n        load_config(None, ov)\n    except ValueError as e:\n        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": str(REPO / "src")},
                         capture_output=True, text=True, timeout=120)  # a fresh process: this one loaded it
    assert "unknown action selector 'retrospex'; choose one of policy." in out.stdout, out.stderr
    assert "retrospex is the plug-in experiments/retrospex: add 'run.plugins=[experiments.retrospex]'" in out.stdout
    assert "run.plugins" in out.stdout and "unknown config key 'action.retrospex'" in out.stdout
    code = ("import sys\nfrom empo2.config import load_config\n"
            f"cfg = load_config(None, [{PLUGIN!r}, 'action.selector=retrospex', 'action.retrospex.k=3'])\n"
            "print('RESULT', cfg.action.retrospex.k, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": f"{REPO / 'src'}:{REPO}"},
                         capture_output=True, text=True, timeout=120)
    assert "RESULT 3 False" in out.stdout, (out.stdout, out.stderr)


@pytest.mark.parametrize("overrides,message", [
    (["run.plugins=[experiments.retrospex]", "action.retrospex.k=0"], "action.retrospex.k must be >= 1, got 0"),
    (["empo2.p=2"], "empo2.p must be in [0, 1], got 2.0"),
    (["run.plugins=[experiments.retrospex]", "action.retrospex.k=abc"],
     "action.retrospex.k: expected an integer, got 'abc'"),
])
def test_a_section_check_that_names_its_key_is_not_prefixed_twice(overrides, message):
    from empo2.config import load_config

    with pytest.raises(ValueError) as e:
        load_config(None, overrides)
    assert str(e.value) == message
