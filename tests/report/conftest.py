"""Run folders for the report tests: one real tiny run through the CLI, synthetic ones (report_helpers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.report.report_helpers import write_synthetic_run

TINY_YAML = """\
run: {{name: {name}, dir: {dir}, progress: false, seed: {seed}}}
model: {{name_or_path: tiny-random}}
env: {{name: tiny, tasks: [fetch-key], max_turns: 5, num_workers: 2}}
action: {{mode: constrained, max_new_tokens: 6}}
rollout: {{tasks_per_iteration: 2, group_size: 2}}
eval: {{episodes: 2}}
trainer: {{iterations: 3, lr: 1.0e-3, tensorboard: false, threads: 1}}
"""


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> Path:
    """A 3-iteration GRPO run of the tiny environment, trained through the real CLI (~5 s).

    One torch thread: on a shared 2-core machine this tiny model runs ~5x faster than with two.
    The thread count is restored afterwards so other tests are unaffected.
    """
    import torch

    from empo2.cli import main

    root = tmp_path_factory.mktemp("report_runs")
    cfg = root / "grpo.yaml"
    cfg.write_text(TINY_YAML.format(name="grpo-tiny", dir=root, seed=0))
    threads = torch.get_num_threads()
    try:
        assert main(["train", "--config", str(cfg)]) == 0
    finally:
        torch.set_num_threads(threads)
    return root / "grpo-tiny"


@pytest.fixture
def make_synthetic_run(tmp_path) -> Callable[..., Path]:
    """``make(name, **kw)`` writes a synthetic run folder under ``tmp_path`` (see ``write_synthetic_run``)."""
    def make(name: str = "empo2-synth", **kw: Any) -> Path:
        return write_synthetic_run(tmp_path / "runs" / name, **kw)

    return make


@pytest.fixture(scope="session")
def built_report(real_run, tmp_path_factory):
    """``build_report`` of the real GRPO run and a synthetic 12-iteration EMPO² run (built once)."""
    from empo2.report import build_report

    root = tmp_path_factory.mktemp("report_synth")
    synth = write_synthetic_run(root / "runs" / "empo2-synth")
    return build_report([real_run, synth], root / "report")
