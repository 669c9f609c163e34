#!/usr/bin/env bash
# Fidelity runs on a 2-GPU machine (see docs/fidelity.md). Usage: bash benchmarks/fidelity/run_gpu.sh PHASE...
# Phases: setup check profile profile4 tp4 calibrate4 tp4cal profileeager profilegap quick full tp2 tp2eager repeat diag fullgap alpaserve
#         warm4 warm4trials warm2 warm2trials pack.
# The warm* phases (issue 13, the warm-up stage clock) stop starting runs once BUDGET_S seconds (default 540) have
# passed since the script started, bound every run by what is left (SIGINT: the executor saves what it measured),
# and pack $OUT/runs.tar.gz on exit whatever happened, so a call's results always come back.
# TAIL_MARGIN=PPxTP (e.g. 1x4) makes the warm calibration fit and write that configuration's admission tail margin.
# ADMISSION="open-loop closed-loop" (default open-loop) runs the warm trials once per admission mode (`execute
# --admission`); closed-loop trials go to warmN-ARRIVALS-PLACEMENT-closed (open-loop keep the old folder names).
# Since issue 13 the executor and the profiler run every stage as one CUDA graph on GPUs; the *eager phases
# (--no-cuda-graphs, with profile-gpu-eager.json) reproduce the earlier eager runs on the same machine. Results go to $OUT (or ./fidelity-out).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-fidelity-out}
F=instances/fidelity
R=$OUT/runs
mkdir -p "$R"
SCALES=${SCALES:-1.5,2,3,5,10}
T_END=$(( $(date +%s) + ${BUDGET_S:-540} ))
PLACEMENTS4W=${PLACEMENTS4W:-simple pipeline4 tp2x2 tp4 pp2tp2 alpaserve}
PLACEMENTS2W=${PLACEMENTS2W:-simple pipeline tp2 alpaserve}
TRIAL_S=${TRIAL_S:-4}
ADMISSION=${ADMISSION:-open-loop}

# bounded COMMAND...: run it with the time left before T_END (less a 25 s reserve to pack); skip it if under 20 s
bounded() {
  local left=$(( T_END - $(date +%s) - 25 ))
  if [ "$left" -lt 20 ]; then echo "skipped (budget): $*"; return 1; fi
  timeout -s INT -k 15 "$left" "$@"
}
# calibrate_warm N INSTANCE_PREFIX PLACEMENT_PREFIX PLACEMENTS: seed-99 runs of every placement (CAL_ARRIVALS,
# default gamma: its bursts and lulls show both hot and cold stages), then the fit
# (stage gaps, device scales, warm-up terms) written to $F/profile-gpuN-warm.json and $F/INSTANCE_PREFIX-*-warm.json
calibrate_warm() {
  local n=$1 inst=$2 pfx=$3 runs=() p a pl
  for p in $4; do [ "$p" = alpaserve ] && continue; pl=$F/$pfx-$p.json
    for a in ${CAL_ARRIVALS:-gamma}; do
      bounded placeopt execute $F/$inst-$a-calibration.json "$pl" --slo-scale 10 -o "$R/wcal$n-$a-$p" \
        && [ -f "$R/wcal$n-$a-$p/requests.csv" ] && runs+=(--run "$R/wcal$n-$a-$p" "$pl")
    done
  done
  python3 -m placement_opt.offline.serving_calibration $F/$inst-poisson.json transformer-5b "${runs[@]}" \
    ${TAIL_MARGIN:+--tail-margin $TAIL_MARGIN} --profile-out $F/profile-gpu$n-warm.json --report "$OUT/calibration$n-warm.json" \
    --instance-out $F/$inst-poisson.json=$F/$inst-poisson-warm.json \
    --instance-out $F/$inst-gamma.json=$F/$inst-gamma-warm.json
  cp $F/profile-gpu$n-warm.json "$OUT/"
}
# trials_warm N INSTANCE_PREFIX PLACEMENT_PREFIX PLACEMENTS: every placement (alpaserve solved on the warm
# instance first), Poisson and Gamma, every SLO scale, TRIAL_S seconds each, admitted by the warm-up clock
# (once per mode in ADMISSION)
trials_warm() {
  local n=$1 inst=$2 pfx=$3 p a pl
  for a in poisson gamma; do for p in $4; do
    pl=$F/$pfx-$p.json
    if [ "$p" = alpaserve ] && ! python3 -c 'import ortools' 2>/dev/null; then
      # the alpaserve solver needs ortools; solve it offline instead (docs/fidelity.md: on the warm
      # 2-GPU instances it chooses placement-pipeline.json, whose trial is then alpaserve's)
      echo "skipped alpaserve $a: ortools is not installed here; solve it offline"; continue
    fi
    if [ "$p" = alpaserve ]; then pl=$R/placement$n-alpaserve-$a.json
      bounded python3 -c "
from placement_opt import load_instance
from placement_opt.io import atomic_write_text
from placement_opt.solvers import run_solver
p = run_solver(load_instance('$F/$inst-$a-warm.json'), 'alpaserve', seed=0)
atomic_write_text('$pl', p.to_json() + '\\n')
print('alpaserve $a:', [(g.devices, g.pp, g.tp, g.models) for g in p.groups])" 2>"$R/solve$n-$a.log" || continue
    fi
    for adm in $ADMISSION; do
      bounded placeopt execute $F/$inst-$a-warm.json "$pl" --slo-scale "$SCALES" --duration "$TRIAL_S" \
        --admission "$adm" -o "$R/warm$n-$a-$p$([ "$adm" = closed-loop ] && echo -closed)"
    done
  done; done
}
case " $* " in *" warm"*) trap 'tar czf "$OUT/runs.tar.gz" -C "$R" . && rm -rf "$R"; echo "packed $OUT/runs.tar.gz"' EXIT ;; esac
for phase in "$@"; do
  echo "=== $phase $(date -u +%T)"
  case $phase in
    setup)
      python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
      nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())' ;;
    check)
      python3 -c '
import numpy as np
from placement_opt.model import Architecture
from placement_opt.executor.selfcheck import sharded_forward, reference_forward
arch = Architecture(layers=4, hidden=1024, heads=16, seq_len=256, vocab=1000, dtype="fp16")
ref = reference_forward(arch, 1, "cuda:0")
for pp, tp in [(p, t) for p, t in [(2, 1), (1, 2), (4, 1), (2, 2)] if p * t <= __import__("torch").cuda.device_count()]:
    out = sharded_forward(arch, pp, tp, backend="nccl", seed=1)
    print(f"nccl pp={pp} tp={tp}: relative error {np.linalg.norm(out - ref) / np.linalg.norm(ref):.2e}")
' ;;
    profile)
      placeopt profile $F/arch.json --name transformer-5b --configs 1x1,2x1,1x2 --batch-sizes 1,2,4 \
        --warmup 5 --repeats 20 -o $F/profile-gpu.json --details "$OUT/profile-gpu-details.json"
      cp $F/profile-gpu.json "$OUT/" ;;
    profile4)
      # 4 GPUs: the configs of the four-models instances' placements
      placeopt profile $F/arch.json --name transformer-5b --configs ${CONFIGS4:-1x1,2x1,4x1,1x2,1x4,2x2} --batch-sizes 1 \
        --warmup 5 --repeats 20 -o $F/profile-gpu4.json
      cp $F/profile-gpu4.json "$OUT/" ;;
    tp4)
      for p in ${PLACEMENTS4:-tp2x2 tp4 pp2tp2 simple}; do for a in poisson gamma; do
        placeopt execute $F/four-models-$a.json $F/placement4-$p.json --slo-scale "$SCALES" -o "$R/four-$a-$p"
      done; done ;;
    calibrate4)
      # issue 13: short runs on another seed (instances *-calibration.json), then the stage gaps and
      # device latency scales they measure (placement_opt.offline.serving_calibration)
      runs=()
      for p in ${PLACEMENTS4:-simple tp4 pp2tp2 tp2x2}; do for a in poisson gamma; do
        placeopt execute $F/four-models-$a-calibration.json $F/placement4-$p.json --slo-scale 10 -o "$R/calib-$a-$p"
        runs+=(--run "$R/calib-$a-$p" $F/placement4-$p.json)
      done; done
      python3 -m placement_opt.offline.serving_calibration $F/four-models-poisson.json transformer-5b "${runs[@]}" \
        --profile-out $F/profile-gpu4-calibrated.json --report "$OUT/calibration4.json" \
        --instance-out $F/four-models-poisson.json=$F/four-models-poisson-calibrated.json \
        --instance-out $F/four-models-gamma.json=$F/four-models-gamma-calibrated.json
      cp $F/profile-gpu4-calibrated.json "$OUT/" ;;
    tp4cal)
      for p in ${PLACEMENTS4:-simple tp4 pp2tp2 tp2x2}; do for a in poisson gamma; do
        placeopt execute $F/four-models-$a-calibrated.json $F/placement4-$p.json --slo-scale "$SCALES" -o "$R/cal-four-$a-$p"
      done; done ;;
    profileeager)
      placeopt profile $F/arch.json --name transformer-5b --configs 1x1,2x1,1x2 --batch-sizes 1,2,4 \
        --warmup 5 --repeats 20 --no-cuda-graphs -o $F/profile-gpu-eager.json
      cp $F/profile-gpu-eager.json "$OUT/" ;;
    profilegap)
      placeopt profile $F/arch.json --name transformer-5b --configs 1x1,2x1 --batch-sizes 1 \
        --warmup 5 --repeats 20 --gap 0.02 -o $F/profile-gpu-gap.json
      cp $F/profile-gpu-gap.json "$OUT/" ;;
    quick)
      for p in simple pipeline; do
        placeopt execute $F/two-models-poisson.json $F/placement-$p.json --duration 5 --slo-scale 5 -o "$R/quick-$p"
      done ;;
    full)
      for a in poisson gamma; do for p in simple pipeline; do
        placeopt execute $F/two-models-$a.json $F/placement-$p.json --slo-scale "$SCALES" -o "$R/$a-$p"
      done; done ;;
    tp2)
      for a in poisson gamma; do
        placeopt execute $F/two-models-$a.json $F/placement-tp2.json --slo-scale "$SCALES" -o "$R/$a-tp2"
      done ;;
    tp2eager)
      for a in poisson gamma; do
        placeopt execute $F/two-models-$a-eager.json $F/placement-tp2.json --no-cuda-graphs --slo-scale "$SCALES" \
          -o "$R/eager-$a-tp2"
      done ;;
    repeat)
      for p in simple pipeline; do
        placeopt execute $F/two-models-gamma.json $F/placement-$p.json --slo-scale "$SCALES" -o "$R/repeat-gamma-$p"
      done ;;
    diag)
      # read-only GPU telemetry while profiling and serving the tp=2 and the simple placement
      nvidia-smi --query-gpu=index,timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv,noheader -lms 250 > "$OUT/smi.csv" &
      SMI=$!
      echo "profile $(date -u +%T.%N)"
      placeopt profile $F/arch.json --name transformer-5b --configs 1x1,1x2 --batch-sizes 1 --repeats 100 \
        -o $F/profile-gpu.json
      for p in tp2 simple; do
        echo "$p $(date -u +%T.%N)"
        placeopt execute $F/two-models-gamma.json $F/placement-$p.json --slo-scale 5 -o "$R/diag-$p"
      done
      echo "end $(date -u +%T.%N)"
      kill $SMI ;;
    fullgap)
      for a in poisson gamma; do for p in simple pipeline; do
        placeopt execute $F/two-models-$a-gap.json $F/placement-$p.json --slo-scale "$SCALES" -o "$R/gap-$a-$p"
      done; done ;;
    alpaserve)
      for a in poisson gamma; do
        python3 -c "
from placement_opt import load_instance
from placement_opt.io import atomic_write_text
from placement_opt.solvers import run_solver
p = run_solver(load_instance('$F/two-models-$a.json'), 'alpaserve', seed=0)
atomic_write_text('$F/placement-alpaserve-$a.json', p.to_json() + '\\n')
print('alpaserve $a:', [(g.devices, g.pp, g.tp, g.models) for g in p.groups])"
        cp $F/placement-alpaserve-$a.json "$R/"
        placeopt execute $F/two-models-$a.json $F/placement-alpaserve-$a.json --slo-scale "$SCALES" -o "$R/$a-alpaserve"
      done ;;
    warm4)
      calibrate_warm 4 four-models placement4 "$PLACEMENTS4W" ;;
    warm4trials)
      trials_warm 4 four-models placement4 "$PLACEMENTS4W" ;;
    warm2)
      calibrate_warm 2 two-models placement "$PLACEMENTS2W" ;;
    warm2trials)
      trials_warm 2 two-models placement "$PLACEMENTS2W" ;;
    pack)
      tar czf "$OUT/runs.tar.gz" -C "$R" . && rm -rf "$R" ;;
  esac
done
