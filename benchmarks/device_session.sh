#!/bin/bash
# One lent GPU machine's session, time-boxed to BUDGET_S seconds (default 540), all output under
# $OUT (the device tool brings back at most 8 files of 16 MiB):
#
#   bash benchmarks/device_session.sh [EXPORT_DIR ...]
#
# 1. the device and its torch;
# 2. benchmarks/bench_gpu.py on Copy/OneStepAttn, K = $BENCH_KS (default 1,8,64), --calibrate, and
#    --profile (the largest pack's kernels by GPU time), alone on the GPU;
# 3. benchmarks/bench_regressor.py --device cuda (Raffel & Ellis's feed-forward models);
# 4. each EXPORT_DIR (a `study export` folder) trained by its own `python -m locattn.offline`
#    worker, all at once, with a deadline that leaves time to pack the runs; meanwhile the `gpu`
#    tests that need torch alone (test_gpu_profile's needs Ray, which these machines lack);
# 5. if time is left: bench_gpu's other cases at K = 8, 64, --calibrate.
#
# Knobs (environment): BENCH_KS="" skips step 2, BENCH_LATE=1 runs it after the workers instead
# (then the workers have the GPU to themselves and step 5 is skipped); REGRESSOR=0 skips step 3;
# GPU_TESTS=0 skips the tests; RUNS_FROM=DIR seeds the workers' /tmp/runs with a carried folder
# of run folders (their checkpoints), so runs stopped in an earlier session continue.
# BENCH_PATH=compiled times step 2 with the graphed step compiled (`bench_gpu.py --train-path
# compiled`: inductor's kernels inside the captured graph; its calibration rows carry path compiled);
# TRAIN_PATH=compiled trains the workers' runs that way (`locattn.offline --train-path`); a worker
# that fails on it goes on eager from its checkpoints. logs/gpu_util.csv samples the GPU's use
# every 30 s while the workers run.
#
# Back: session.log (everything printed), logs.tar.gz (each step's log and the calibration
# table), runs.tar.xz.part?? (the workers' run folders; `cat` the parts, then `tar -xJf`, then
# `study import <study> runs` and `study resume <study>`; parts beyond the fourth wait in
# /tmp/parts for a second call). The machine's python3 holds torch but
# not rapidfuzz: carry its wheel in .whl/ (docs/gpu_offline.md).
set -u
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT" /tmp/logs
BUDGET_S=${BUDGET_S:-540}
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/session.log") 2>&1
left() { echo $((BUDGET_S - SECONDS)); }
step() { echo "=== $(date -u +%H:%M:%S) (+${SECONDS}s, $(left)s left) $*"; }

step "1. device"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, rapidfuzz; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
nproc; uptime

BENCH_KS=${BENCH_KS-1,8,64}
bench() {  # $1: the longest it may take
    step "2. bench_gpu copy/onestep, K = $BENCH_KS, train path ${BENCH_PATH:-eager}"
    # (on the H200, K = 1, 8, 64 took about 200 s with the solo trial; K = 256 did not fit in 210)
    local cal=(--calibrate /tmp/logs/cost_calibration.json)  # compiled rows carry path compiled
    timeout "$1" python3 benchmarks/bench_gpu.py --ks "$BENCH_KS" --profile --epochs "${BENCH_EPOCHS:-2}" \
        --train-path "${BENCH_PATH:-eager}" "${cal[@]}" --cases copy/onestep 2>&1 | tee /tmp/logs/bench_gpu.txt
    echo "bench_gpu exit ${PIPESTATUS[0]}"
}
[ -n "$BENCH_KS" ] && [ "${BENCH_LATE:-0}" != 1 ] && bench "${BENCH_TIMEOUT_S:-240}"

if [ "${REGRESSOR:-1}" = 1 ]; then
    step "3. bench_regressor cuda"
    timeout 45 python3 benchmarks/bench_regressor.py --device cuda 2>&1 | tee /tmp/logs/bench_regressor.txt
    echo "bench_regressor exit ${PIPESTATUS[0]}"
fi

if [ $# -gt 0 ]; then
    deadline=$(( $(left) - 75 ))
    step "4. offline workers on $*, deadline ${deadline}s; gpu tests beside them"
    if [ -n "${RUNS_FROM:-}" ]; then mkdir -p /tmp/runs && cp -r "$RUNS_FROM"/. /tmp/runs/; ls /tmp/runs | wc -l; fi
    pids=()
    end=$(( $(date +%s) + deadline ))
    for d in "$@"; do
        name=$(basename "$d")
        (
            python3 -m locattn.offline "$d" --out /tmp/runs --deadline "$deadline" --device cuda \
                ${TRAIN_PATH:+--train-path "$TRAIN_PATH"}
            rc=$?; rest=$(( end - $(date +%s) ))
            # a compiled worker that failed (not 0, not 75 = stopped by its deadline) goes on
            # eager from its runs' checkpoints, the path being operational
            if [ -n "${TRAIN_PATH:-}" ] && [ "$rc" != 0 ] && [ "$rc" != 75 ] && [ "$rest" -gt 90 ]; then
                echo "=== worker exit $rc with the $TRAIN_PATH path: going on eager for ${rest}s"
                python3 -m locattn.offline "$d" --out /tmp/runs --deadline "$rest" --device cuda
            else
                exit "$rc"
            fi
        ) > "/tmp/logs/offline_$name.txt" 2>&1 &
        pids+=($!)
    done
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 > /tmp/logs/gpu_util.csv 2>&1 &
else
    step "4. gpu tests"
    pids=()
fi
if [ "${GPU_TESTS:-1}" = 1 ]; then
    timeout 240 python3 -m pytest -m gpu tests/locattn/test_graphed.py tests/locattn/test_packed_decode.py \
        tests/locattn/test_regressor_fused.py -p no:cacheprovider -p no:logging --tb=short -q -rA > /tmp/logs/gpu_tests.txt 2>&1
    echo "gpu tests exit $?"; grep -E "^(E |FAILED|PASSED|[0-9]+ (passed|failed))" /tmp/logs/gpu_tests.txt | tail -40
fi
for p in "${pids[@]}"; do wait "$p"; echo "worker $p exit $?"; done
for f in /tmp/logs/offline_*.txt; do [ -e "$f" ] && { echo "--- $f"; tail -3 "$f"; }; done

if [ -n "$BENCH_KS" ] && [ "${BENCH_LATE:-0}" = 1 ]; then
    [ "$(left)" -gt 100 ] && bench $(( $(left) - 40 ))
elif [ "$(left)" -gt 130 ]; then
    step "5. bench_gpu other cases"
    timeout $(( $(left) - 40 )) python3 benchmarks/bench_gpu.py --ks 8,64 \
        --calibrate /tmp/logs/cost_calibration.json --epochs 1 \
        --cases copy/content,copy/birope,copy/mix_onestep 2>&1 | tee /tmp/logs/bench_gpu_cases.txt
    echo "bench_gpu cases exit ${PIPESTATUS[0]}"
fi

step "6. pack"
if [ -d /tmp/runs ]; then
    rm -rf /tmp/parts && mkdir /tmp/parts
    tar -C /tmp -cf - runs | xz -T0 -6 | split -b 15M -d - /tmp/parts/runs.tar.xz.part
    # 64 MiB come back a call, the logs included: four 15 MiB parts now, the rest stays in
    # /tmp/parts for a second call on the still-warm machine (30 s): `cp /tmp/parts/* $OUT/`
    ls /tmp/parts | head -4 | while read -r f; do mv "/tmp/parts/$f" "$OUT/"; done
    rest=$(ls /tmp/parts | wc -l)
    [ "$rest" -gt 0 ] && echo "WARNING: $rest more part(s) of runs.tar.xz wait in /tmp/parts: within 30 s," \
        "call again with 'cp /tmp/parts/* \$OUT/' (at most 8 a call)"
fi
nvidia-smi --query-gpu=memory.used --format=csv
tar -C /tmp -czf "$OUT/logs.tar.gz" logs
ls -la "$OUT"
step "done"
