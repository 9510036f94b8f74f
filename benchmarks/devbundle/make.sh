#!/usr/bin/env bash
# Build .devbundle/ (git-ignored through .git/info/exclude: add '/.devbundle/' there) from the repository's venv:
# what a GPU machine without internet needs to run benchmarks/gpu_check.sh (docs/notes/performance.md, "GPU").
# Run from the repo root: bash benchmarks/devbundle/make.sh; then on the device: bash .devbundle/run.sh
# (carry .devbundle; about 30 MB).
set -euo pipefail
B=.devbundle PY=.venv/bin/python
rm -rf $B/whl $B/tok $B/minilm $B/base $B/minilm.q8.safetensors && mkdir -p $B/whl $B/tok $B/minilm $B/base
$PY -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d $B/whl bm25s==0.3.16 PyStemmer==3.1.0 threadpoolctl==3.8.0
T=$($PY -c 'from empo2.config import DEFAULT_MODEL; from empo2.policy.loading import resolve_model_path as r; print(r(DEFAULT_MODEL))')
cp "$T"/tokenizer.json "$T"/tokenizer_config.json "$T"/chat_template.jinja $B/tok/
M=$($PY -c 'from empo2.memory.embedder import minilm_path; print(minilm_path())')
(cd "$M" && cp -r modules.json config_sentence_transformers.json sentence_bert_config.json config.json tokenizer.json \
  tokenizer_config.json vocab.txt special_tokens_map.json 1_Pooling "$OLDPWD/$B/minilm/")
cp benchmarks/devbundle/run.sh benchmarks/devbundle/minilm_q8.py $B/
$PY $B/minilm_q8.py pack "$M/model.safetensors" $B/minilm.q8.safetensors
git archive 7175398 src | tar -x -C $B/base
du -sh $B
