#!/usr/bin/env bash
# One GPU run of benchmarks/gpu_check.sh from this carried bundle (no internet on the device):
#   whl/    cp312 manylinux wheels the machine lacks (bm25s, PyStemmer), installed into $SITE
#   tok/    the packaged SmolLM2 tokenizer files (--tokenizer)
#   minilm/ + minilm.q8.safetensors: the packaged MiniLM embedder, weights int8 (unpacked to fp32 in $EMB:
#           45 MB of fp16 would not leave room under the transfer limit; embeddings agree to cosine 0.999)
#   base/src  `git archive 7175398 src`: the sampler before the device-side work (--baseline-src)
# Device:  bash .devbundle/run.sh                      (writes $OUT/gpu_check.log and $OUT/gpu_check.json)
# Locally: OUT=/tmp/o PYTHON=.venv/bin/python WHL=DIR_OF_CP311_WHEELS bash .devbundle/run.sh --shape tiny --device cpu
# Extra arguments go to gpu_check.sh (e.g. --cases gen_base,gen).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_check_out}"
SITE="${SITE:-/tmp/site}"
WHL="${WHL:-.devbundle/whl}"
PY="${PYTHON:-python3}"
LIMIT_S="${LIMIT_S:-480}"
mkdir -p "$OUT" "$SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHL"/*.whl || echo "run.sh: wheel install failed" >&2
EMB="${EMB:-/tmp/empo2-minilm}"  # the embedder folder with fp32 weights, outside the bundle (91 MB)
rm -rf "$EMB" && cp -r .devbundle/minilm "$EMB" &&
  "$PY" .devbundle/minilm_q8.py unpack .devbundle/minilm.q8.safetensors "$EMB/model.safetensors"
export PYTHONPATH="$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHON="$PY"
"$PY" -c 'import bm25s, Stemmer, empo2; print("run.sh: bm25s", bm25s.__file__, "| empo2", empo2.__file__)' 2>&1 |
  tee "$OUT/gpu_check.log"
timeout -k 15 "$LIMIT_S" bash benchmarks/gpu_check.sh --tokenizer .devbundle/tok --baseline-src .devbundle/base/src \
  --deadline-s $((LIMIT_S * 5 / 6)) --out "$OUT/gpu_check.json" empo2.memory.embedder="$EMB" "$@" \
  2>&1 | tee -a "$OUT/gpu_check.log"
rc=${PIPESTATUS[0]}
echo "run.sh: gpu_check exit $rc (124 = timed out after ${LIMIT_S} s; the JSON holds every finished case)" | tee -a "$OUT/gpu_check.log"
exit "$rc"
