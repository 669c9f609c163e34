#!/usr/bin/env bash
# LLM fidelity on one GPU, and on two or four for the 2-GPU and 4-GPU sets (docs/fidelity-llm.md). Usage: bash benchmarks/fidelity/llm/run_gpu.sh PHASE...
# Phases (in order; each fits a 10-minute command; times measured for an H100 are in the doc):
#   require   stop (exit 3) unless every GPU's name holds $GPU_MODEL (e.g. GPU_MODEL=H100: the cost tables' card;
#             a machine of another card would measure that card): put it first
#   setup     install the package (no deps: torch+CUDA is there; no ortools needed), print the GPU
#   check     GPU self-check (green contexts, paged decode, the Triton paged attention against a torch
#             reference and against the gather path, graphs) and a tiny placeopt execute (check/)
#   roofline  decode step of a LLaMA-2-7B shape at batch 1-32 vs the HBM roofline, the engine's paged
#             attention and the previous gather path timed in the same run (gather_over_paged)
#   engine    engine micro-benchmark (results/engine.json): host time per job, the 5 LLMs' decode
#             steps alone and together on SM partitions and on plain streams (overlap, HBM bandwidth)
#   profile   cost tables of the 5 fidelity LLMs (TP 1, SM shares $SHARES) into benchmarks/fidelity/llm/tables/
#   measured  instances that use those tables (instances/fidelity-llm/measured/)
#   mux       the muxserve placement on the $MUX workloads (default poisson; poisson-x3: its rates x3) with
#             policies $POLICIES (one set of workers per workload)
#   traces    the muxserve placement on the $TRACES workloads (default conv code; adbs)
#   temporal  the temporal placement on the $TEMPORAL workloads (default poisson conv code)
#   profile2  2-GPU set ($TP2, instances/fidelity-llm/tp2): cost tables of $MODELS2 at TP 1 (one model per GPU
#             at once) and TP 2 (with 4 GPUs two models at once), SM shares $SHARES2, merged per model into
#             $TABLES2 (benchmarks/fidelity/llm/tables-tp2). The 4-GPU set: TP2=instances/fidelity-llm/gpu4
#             MODELS2="llm-1b llm-3b llm-7b llm-8b" TABLES2=$B/tables-gpu4 PLACEMENTS2="spatial muxserve temporal"
#   profile4  the set's cost tables of $MODELS2 at TP 4 (four GPUs), SM shares $SHARES4 (default 1), merged into
#             $TABLES2 with its tp1/ and tp2/ tables (the 4-GPU set's temporal4 placement: one TP-4 mesh)
#   measured2 the 2-GPU set's instances that use those tables ($TP2/measured/)
#   tp2       the set's placements $PLACEMENTS2 (default spatial muxserve temporal colocated), each on
#             fresh workers, into $RESULTS/<set folder name>-poisson-<placement> (POLICIES2, e.g.
#             adbs,round-robin,fcfs: one trial per policy on those workers; default the placement's own)
#   pack      benchmarks/fidelity/llm/{tables,results}/ and instances/fidelity-llm/measured/ into
#             $OUT/llm-fidelity-<time>.tar.gz: end every call with it and unpack the tarball at the
#             repository root here (tar xzf), then later calls carry the tables.
# $OUT is the device's output folder (default ./llm-fidelity-out).
# Knobs: RESULTS (the results folder, default $B/results: give each GPU run of a new engine its own,
# e.g. $B/results-v2), SHARES, MODELS, REPEATS, TABLES (profile: the tables' folder, default $B/tables; `measured`
# points the instances at it), PROFILE_GRID (the profiles' --batch-sizes and --seq-lens), POLICIES (mux;
# default adbs,round-robin,fcfs), and
# DEADLINE_S (seconds from the start, default 540): a phase starting after it is skipped, and the
# profile and replay phases are interrupted (SIGINT: partial results saved) when it passes, so
# `pack` still runs inside the device's 10-minute limit. CAP_<phase> (e.g. CAP_profile=170) bounds
# one phase's seconds the same way, so a later phase keeps its time (a model whose profile is cut
# gets no table; `measured` then keeps the committed instances). RUN_CAP_S (default 0: none) bounds
# each `placeopt execute` of the mux, traces, temporal and tp2 phases the same way, so a slow run
# (e.g. a long warm-up) leaves the next one its time; an interrupted run saves its partial results.
# BACKEND (default nccl; gloo runs the profile2, measured2 and tp2 phases on CPU processes: the dry
# run of tests/executor/test_llm_tp2_set.py, with TP2 a tiny copy of the 2-GPU set and SHARES2=1).
# HOST_PROBE (default 1; 0 passes --no-host-probe: every `placeopt execute` skips the probe of the
# meshes' decode host time before its trials, as the CPU dry run does).
# JOB_TRACE (default 0; 1 passes --job-trace: every `placeopt execute` of those phases also writes jobs.csv, each
# job's host launch and device start and end).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-llm-fidelity-out}
B=benchmarks/fidelity/llm
I=instances/fidelity-llm
R=${RESULTS:-$B/results}
SHARES=${SHARES:-0.2,0.5,1}
MODELS=${MODELS:-llm-0.4b llm-1b llm-3b llm-7b llm-8b}
REPEATS=${REPEATS:-5}
TABLES=${TABLES:-$B/tables}
POLICIES=${POLICIES:-adbs,round-robin,fcfs}
MUX=${MUX:-poisson}
DEADLINE_S=${DEADLINE_S:-540}
TRACES=${TRACES:-conv code}
TEMPORAL=${TEMPORAL:-poisson conv code}
TP2=${TP2:-$I/tp2}
TABLES2=${TABLES2:-$B/tables-tp2}
SHARES2=${SHARES2:-0.5,1}
SHARES4=${SHARES4:-1}
MODELS2=${MODELS2:-llm-7b llm-8b}
PROBE=$([ "${HOST_PROBE:-1}" = 0 ] && echo --no-host-probe || echo --host-probe)
TRACE=(); [ "${JOB_TRACE:-0}" = 1 ] && TRACE=(--job-trace)
PLACEMENTS2=${PLACEMENTS2:-spatial muxserve temporal colocated}
RUN_CAP_S=${RUN_CAP_S:-0}
BACKEND=${BACKEND:-nccl}
PROFILE_GRID=${PROFILE_GRID:---batch-sizes 1,2,4,8,16,32 --seq-lens 64,256,1024,2048}
read -r -a GRID <<< "$PROFILE_GRID --warmup 2 --repeats $REPEATS"
START=$SECONDS
RUN_CAP=0
PHASE_CAP=0
PHASE_START=$SECONDS
# seconds left for the running phase: to DEADLINE_S, and to its CAP_<phase> when one is set
left() { local l=$((DEADLINE_S - (SECONDS - START))) c
  if [ "$PHASE_CAP" -gt 0 ]; then c=$((PHASE_CAP - (SECONDS - PHASE_START))); [ "$c" -lt "$l" ] && l=$c; fi
  echo "$l"; }
# `bounded`, each command also at most RUN_CAP_S seconds (the phases that replay placements)
run_capped() { RUN_CAP=$RUN_CAP_S; bounded "$@"; local rc=$?; RUN_CAP=0; return $rc; }
# the profiled GPU's name for the cost tables (cpu-process on a machine without CUDA)
gpu_name() { python3 -c 'import torch
n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu-process"
print("H200" if "H200" in n else "H100-80GB" if "H100" in n else n.replace(" ", "-"))'; }
# wait for the profiles started side by side (PIDS): a plain `wait` would also wait for the GPU log below, forever
PIDS=()
wait_profiles() { [ ${#PIDS[@]} -eq 0 ] || wait "${PIDS[@]}"; PIDS=(); }
n_gpus() { python3 -c 'import torch; print(torch.cuda.device_count())'; }
bounded() { local s; s=$(left); if [ "$RUN_CAP" -gt 0 ] && [ "$RUN_CAP" -lt "$s" ]; then s=$RUN_CAP; fi
  if [ "$s" -le 5 ]; then echo "skipped (deadline): $*"; return 0; fi
  timeout --signal=INT --kill-after=40 "$s" "$@"; }
mkdir -p "$OUT" "$R" "$TABLES"
# Every second until `pack` (or the end): each GPU's SM and memory clocks (MHz), power (W), temperature (C),
# utilisation (%) and active clock-event reasons (NVML bits: a GPU slowing itself, e.g. hardware slowdown 0x8,
# thermal 0x20/0x40, power brake 0x80), prefixed by the Unix time, appended to $R/gpu-log.csv; llm_fidelity.py
# reads it within each run's trial window (summary.json trial_wall_s). Only where nvidia-smi is found.
GPU_LOG_PID=
# stop the GPU log and wait (at most 5 s: a hung nvidia-smi must not hold `pack`) until it has ended, so `pack`
# reads a file no one writes any more
gpu_log_stop() { [ -n "$GPU_LOG_PID" ] && { kill "$GPU_LOG_PID" 2>/dev/null
  timeout 5 tail --pid="$GPU_LOG_PID" -f /dev/null 2>/dev/null; }; GPU_LOG_PID=; }
if command -v nvidia-smi >/dev/null; then
  REASONS=clocks_event_reasons.active
  nvidia-smi --query-gpu=$REASONS --format=csv >/dev/null 2>&1 || REASONS=clocks_throttle_reasons.active
  (trap exit TERM
   while :; do t=$(date +%s.%N)
     nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,$REASONS \
       --format=csv,noheader,nounits | sed "s/^/$t, /"; sleep 1; done) >> "$R/gpu-log.csv" 2>/dev/null &
  GPU_LOG_PID=$!
  trap gpu_log_stop EXIT
fi
# `pack` packs this call's $RESULTS only: a call that ends without it leaves its results on the machine
# (lost when the machine goes back), so say so before anything runs
[ "${*: -1}" = pack ] || echo "warning: the last phase is not pack: $R stays on this machine unless a later pack packs it"
for phase in "$@"; do
  cap_var="CAP_$phase"
  PHASE_CAP=${!cap_var:-0}
  PHASE_START=$SECONDS
  echo "=== $phase $(date -u +%T) ($((SECONDS - START)) s)"
  if [ "$phase" != pack ] && [ "$(left)" -le 0 ]; then echo "skipped: past DEADLINE_S=$DEADLINE_S"; continue; fi
  case $phase in
    require)
      # stop at once on a machine whose GPUs are not $GPU_MODEL (the cost tables' card): its runs would measure
      # another card (an H200 ran the H100 tables' steps 5-9% faster) and cost the call's device time for nothing
      [ -n "${GPU_MODEL:-}" ] || { echo "require: set GPU_MODEL (e.g. H100)"; exit 2; }
      names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
      if [ -z "$names" ] || grep -qv "$GPU_MODEL" <<< "$names"; then
        echo "require: this machine's GPUs are ${names:-none found}, not $GPU_MODEL: stopping"; exit 3
      fi
      echo "require: $(wc -l <<< "$names") x $GPU_MODEL" ;;
    setup)
      python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
      nvidia-smi -L
      python3 -c 'import torch, torch.cuda.green_contexts as g; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.device_count(), "GPUs; green contexts built:", g.SUPPORTED if hasattr(g, "SUPPORTED") else "?")'
      python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1 ;;
    check)
      mkdir -p $B/check
      bounded python3 $B/gpu_check.py 2>&1 | tee $B/check/check.txt
      bounded placeopt execute instances/tiny/llm-cpu.json instances/tiny/llm-cpu-placement-1gpu.json --backend nccl \
        -o $B/check/tiny-gpu 2>&1 | tee -a $B/check/check.txt
      cp $B/check/check.txt "$OUT/" ;;
    roofline)
      bounded python3 $B/roofline.py -o "$R/roofline.json" 2>&1 | tail -24
      cp "$R/roofline.json" "$OUT/" 2>/dev/null ;;
    engine)
      bounded python3 $B/engine_bench.py $I/poisson.json -o "$R/engine.json" 2>&1 | tail -30 ;;
    profile)
      GPU=$(gpu_name)
      for m in $MODELS; do
        bounded placeopt profile $I/poisson.json --model $m --llm --tp 1 --sm-shares "$SHARES" "${GRID[@]}" \
          --gpu-name "$GPU" -o "$TABLES/$m.json" --details "$TABLES/$m.details.json" 2>&1 | tail -3
      done ;;
    measured)
      python3 $B/measured_instances.py "$TABLES" ;;
    mux)
      for w in $MUX; do
        run_capped placeopt execute $I/measured/$w.json $I/$w-muxserve.placement.json --policy "$POLICIES" "$PROBE" "${TRACE[@]}" \
          --backend "$BACKEND" -o "$R/$w-muxserve" 2>&1 | tail -40
      done ;;
    traces)
      for w in $TRACES; do
        run_capped placeopt execute $I/measured/$w.json $I/$w-muxserve.placement.json --policy adbs --backend "$BACKEND" "$PROBE" "${TRACE[@]}" \
          -o "$R/$w-muxserve" 2>&1 | tail -20
      done ;;
    temporal)
      for w in $TEMPORAL; do
        run_capped placeopt execute $I/measured/$w.json $I/$w-temporal.placement.json --backend "$BACKEND" "$PROBE" "${TRACE[@]}" \
          -o "$R/$w-temporal" 2>&1 | tail -20
      done ;;
    profile2)
      GPU=$(gpu_name)
      NGPU=$(n_gpus)
      mkdir -p "$TABLES2/tp1" "$TABLES2/tp2"
      i=0
      for m in $MODELS2; do  # TP 1: with several GPUs, one model on each at once
        args=(placeopt profile $TP2/poisson.json --model $m --llm --tp 1 --backend "$BACKEND" --sm-shares "$SHARES2"
              "${GRID[@]}" --gpu-name "$GPU" -o "$TABLES2/tp1/$m.json" --details "$TABLES2/tp1/$m.details.json")
        if [ "$NGPU" -ge 2 ]; then
          (export CUDA_VISIBLE_DEVICES=$((i % NGPU)); bounded "${args[@]}" 2>&1 | tail -3) & PIDS+=($!)
          i=$((i + 1)); [ $((i % NGPU)) -eq 0 ] && wait_profiles
        else
          bounded "${args[@]}" 2>&1 | tail -3
        fi
      done
      wait_profiles
      i=0
      for m in $MODELS2; do  # TP 2: with four GPUs or more, two models at once on GPUs 0-1 and 2-3, ...
        args=(placeopt profile $TP2/poisson.json --model $m --llm --tp 2 --backend "$BACKEND" --sm-shares "$SHARES2"
              "${GRID[@]}" --gpu-name "$GPU" -o "$TABLES2/tp2/$m.json" --details "$TABLES2/tp2/$m.details.json")
        if [ "$NGPU" -ge 4 ]; then
          pair=$((i % (NGPU / 2)))
          (export CUDA_VISIBLE_DEVICES=$((2 * pair)),$((2 * pair + 1)); bounded "${args[@]}" 2>&1 | tail -3) & PIDS+=($!)
          i=$((i + 1)); [ $((i % (NGPU / 2))) -eq 0 ] && wait_profiles
        else
          bounded "${args[@]}" 2>&1 | tail -3
        fi
      done
      wait_profiles
      python3 $B/merge_tables.py "$TABLES2" "$TABLES2/tp1" "$TABLES2/tp2" ;;
    profile4)
      GPU=$(gpu_name)
      mkdir -p "$TABLES2/tp4"
      for m in $MODELS2; do
        bounded placeopt profile $TP2/poisson.json --model $m --llm --tp 4 --backend "$BACKEND" --sm-shares "$SHARES4" \
          "${GRID[@]}" --gpu-name "$GPU" -o "$TABLES2/tp4/$m.json" --details "$TABLES2/tp4/$m.details.json" 2>&1 | tail -3
      done
      python3 $B/merge_tables.py "$TABLES2" "$TABLES2/tp1" "$TABLES2/tp2" "$TABLES2/tp4" ;;
    measured2)
      python3 $B/measured_instances.py "$TABLES2" $TP2 ;;
    tp2)
      for p in $PLACEMENTS2; do
        run_capped placeopt execute $TP2/measured/poisson.json $TP2/poisson-$p.placement.json --backend "$BACKEND" "$PROBE" "${TRACE[@]}" \
          ${POLICIES2:+--policy "$POLICIES2"} \
          -o "$R/$(basename "$TP2")-poisson-$p" 2>&1 | tail -20
      done ;;
    pack)
      gpu_log_stop
      tar czf "$OUT/llm-fidelity-$(date -u +%H%M%S).tar.gz" $B/tables "$TABLES" $R $(test -d $B/check && echo $B/check) \
        $(test -d $I/measured && echo $I/measured) $(test -d "$TABLES2" && echo "$TABLES2") \
        $(test -d $TP2/measured && echo $TP2/measured)
      ls -la "$OUT" ;;
    *)
      echo "unknown phase $phase"; exit 2 ;;
  esac
done
