#!/usr/bin/env bash
# Profile the LLaMA-shaped cost tables placeopt ships (placement_opt/data/llm_tables/, issue 11 item 2)
# on a GPU machine with torch + CUDA (no internet, no solver dependencies needed).
# Usage: bash benchmarks/llm_tables/run_gpu.sh PHASE...   (docs/llm.md, "Shipped H100 tables")
#   setup   install the package without dependencies, print the GPUs
#   tp1     TP 1 tables of $MODELS_TP1, one model per GPU at a time (all GPUs in parallel)
#   tp2     TP 2 tables of $MODELS_TP2 (needs two GPUs)
#   merge   join each model's TP degrees into $DEST/<model>-<gpu>.json
#   pack    the raw tables, their details (SM counts, weight and runtime memory per GPU) and the
#           merged tables into $OUT/llm-tables-<time>.tar.gz: unpack it at the repository root
# Knobs: MODELS_TP1, MODELS_TP2, SHARES (SM shares), REPEATS, DEADLINE_S (default 560: a phase starting
# later is skipped and a running profile is interrupted so `pack` still runs), OUT (default ./llm-tables-out).
# The grid: batch 1-32 and lengths 64-4096 (prefill points over the 4096-token budget with batch > 1 are
# not measured); a model whose KV pool for the largest batch x length would not fit one 80 GB GPU
# beside its weights gets a smaller largest length ($GRID_<model with - and . as _>, see below).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-llm-tables-out}
B=benchmarks/llm_tables
RAW=$B/raw
DEST=${DEST:-placement_opt/data/llm_tables}
SRC=$B/models.json
MODELS_TP1=${MODELS_TP1:-llama-2-13b llama-2-7b llama-3-8b llama-3.2-3b llama-3.2-1b}
MODELS_TP2=${MODELS_TP2:-llama-2-13b llama-2-7b llama-3-8b}
SHARES=${SHARES:-0.2,0.5,1}
REPEATS=${REPEATS:-3}
DEADLINE_S=${DEADLINE_S:-560}
BATCHES=1,2,4,8,16,32
LONG=64,128,256,512,1024,2048,4096
SHORT=64,128,256,512,1024,2048
START=$SECONDS
# KV bytes per token: 7B 0.5 MB, 13B 0.8 MB (no grouped-query attention): 32 x 4096 tokens would not fit
grid() {  # the --batch-sizes / --seq-lens of model $1 at TP $2
  case "$1:$2" in
    llama-2-13b:1) echo "--batch-sizes 1,2,4,8,16 --seq-lens $SHORT" ;;
    llama-2-13b:*|llama-2-7b:*) echo "--batch-sizes $BATCHES --seq-lens $SHORT" ;;
    *) echo "--batch-sizes $BATCHES --seq-lens $LONG" ;;
  esac; }
left() { echo $((DEADLINE_S - (SECONDS - START))); }
bounded() { local s; s=$(left); if [ "$s" -le 5 ]; then echo "skipped (deadline): $*"; return 0; fi
  timeout --signal=INT --kill-after=40 "$s" "$@"; }
gpu_name() { python3 -c 'import torch
n = torch.cuda.get_device_name(0)
print("H200" if "H200" in n else "H100-80GB" if "H100" in n else n.replace(" ", "-"))'; }
profile() {  # model, tp
  local g; read -r -a g <<< "$(grid "$1" "$2")"
  bounded placeopt profile $SRC --model "$1" --llm --tp "$2" --sm-shares "$SHARES" "${g[@]}" --warmup 2 \
    --repeats "$REPEATS" --gpu-name "$(gpu_name)" -o "$RAW/tp$2/$1.json" --details "$RAW/tp$2/$1.details.json" 2>&1 | tail -2; }
mkdir -p "$OUT" "$RAW/tp1" "$RAW/tp2"
for phase in "$@"; do
  echo "=== $phase $(date -u +%T) ($((SECONDS - START)) s)"
  case $phase in
    setup)
      python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
      nvidia-smi -L ;;
    tp1)
      n=$(python3 -c 'import torch; print(torch.cuda.device_count())')
      i=0
      for m in $MODELS_TP1; do
        (export CUDA_VISIBLE_DEVICES=$((i % n)); profile "$m" 1) &
        i=$((i + 1))
        if [ $((i % n)) -eq 0 ]; then wait; fi
      done
      wait ;;
    tp2)
      for m in $MODELS_TP2; do profile "$m" 2; done ;;
    merge)
      python3 benchmarks/fidelity/llm/merge_tables.py "$RAW/merged" "$RAW/tp1" "$RAW/tp2"
      mkdir -p "$DEST"
      gpu=$(gpu_name | tr 'A-Z' 'a-z' | sed 's/-80gb//')
      for f in "$RAW"/merged/*.json; do cp "$f" "$DEST/$(basename "$f" .json)-$gpu.json"; done ;;
    pack)
      tar czf "$OUT/llm-tables-$(date -u +%H%M%S).tar.gz" "$RAW" "$DEST"
      ls -la "$OUT" ;;
    *)
      echo "unknown phase $phase"; exit 2 ;;
  esac
done
