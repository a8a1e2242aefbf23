#!/bin/sh
# The CUDA recipe: TVM against PET + TVM, tuned, built on a CPU host and timed on a GPU host.
#
# The GPU host needs no TVM install: everything that needs TVM's compiler runs on the CPU host
# (nvcc for sm_90 included), and only TVM's runtime and the built libraries go to the GPU host
# (scripts/gpu/pack.py). From the repository root, with the venv active:
#
#   sh scripts/gpu/recipe.sh prepare     # CPU host: ~35 min on 2 cores (the batch dominates)
#   OUT=results sh scripts/gpu/recipe.sh time1   # GPU host, build/gpu_pack copied there, ~3 min
#   (copy results/ back to build/gpu_call1)
#   sh scripts/gpu/recipe.sh tuned       # CPU host: records committed, tuned builds, ~15 min
#   OUT=results sh scripts/gpu/recipe.sh time2   # GPU host, build/gpu_pack2 copied there, ~2 min
#   (copy results/ back to build/gpu_call2)
#   sh scripts/gpu/recipe.sh table       # CPU host: benchmarks/results/cuda-<gpu>.{json,md}
#
# Whole models: every mutant of a whole model built end to end is too many nvcc builds
# (CSRNet: 148), so build the originals only and let the kernel times propose the builds:
#   MODELS="bert_encoder csrnet" TRIALS=8 MAX_MUTANTS=0 SINGLES=4 W=build/gpuw \
#       sh scripts/gpu/recipe.sh prepare     (then time1, tuned, time2, table with the same)
# Inception-v3: MODELS=inception_v3 TRIALS=4 MAX_MUTANTS=0 SINGLES=4 W=build/gpui (prepare:
# 41 min on 2 cores), and time1 with RUN_BATCH_ARGS="--min-ms 2" (samples of 2 ms, not 5) to
# keep the first timing short: 3,126 functions in 55 s.
# TVM's graph rewrites (CombineParallelMatmul, ...) are on for both sides (prepare_cuda.py
# --no-tvm-rewrites turns them off; benchmarks/results/cuda-h100.md was built without them).
set -eu
MODELS=${MODELS:-"three_matmuls conv5x5 dilated_conv two_1x1_convs csrnet_backend"}
ARCH=${ARCH:-sm_90}
TRIALS=${TRIALS:-16}
W=${W:-build/gpu}   # this run's folders: $W (prepare), ${W}2 (tuned), ${W}_pack, ${W}_call1, ...
E2E=${MAX_MUTANTS:+--max-mutants $MAX_MUTANTS}
WHEEL_DIR=build/wheels
onnx_paths() { for m in $MODELS; do printf 'build/models/%s.onnx ' "$m"; done; }
wheel() { ls $WHEEL_DIR/apache_tvm_ffi-*cp312*.whl; }

case "${1:-}" in
prepare)
    mkdir -p build/models
    for m in $MODELS; do tvm-pet model "$m" "build/models/$m.onnx"; done
    pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 apache-tvm-ffi==0.1.14.post1 -d $WHEEL_DIR
    # every verified mutant in place (at most MAX_MUTANTS), weights as inputs, TVM's default
    # GPU schedules: no records at all (an empty records folder)
    mkdir -p $W/no_records
    python scripts/gpu/prepare_cuda.py $(onnx_paths) --out $W --arch $ARCH \
        --records $W/no_records $E2E
    # the tuning batch: TRIALS MetaSchedule candidates per task that reduces, two shards
    for s in 0 1; do
        python scripts/gpu/prepare_cuda.py $(onnx_paths) --out $W --arch $ARCH \
            --no-e2e --batch-trials $TRIALS --shard $s/2 &
    done
    wait
    python scripts/gpu/pack.py --runtime $W/e2e/* --mutants \
        --batch $W/batch_0 $W/batch_1 --ffi-wheel "$(wheel)" --out ${W}_pack \
        --part-mib 60 ;;
time1)  # on the GPU machine
    RUN_CUDA_NAME=cuda-default.json sh scripts/gpu/on_gpu.sh ${W}_pack "$OUT" ;;
tuned)
    python scripts/gpu/commit_cuda.py $W/batch_0=${W}_call1/times_batch_0.json \
        $W/batch_1=${W}_call1/times_batch_1.json --arch $ARCH \
        --summary ${W}_call1/commit_summary.json
    python scripts/gpu/prepare_cuda.py $(onnx_paths) --out ${W}2 --arch $ARCH \
        --suffix=-tuned --records tvm_pet/tuning_logs $E2E --singles ${SINGLES:-0} \
        --combine ${W}_call1/times_batch_0.json ${W}_call1/times_batch_1.json
    python scripts/gpu/pack.py --runtime $W/e2e/* ${W}2/e2e/* --mutants \
        --ffi-wheel "$(wheel)" --out ${W}_pack2 --part-mib 60 ;;
time2)  # on the GPU machine: two processes, one after the other
    for n in 1 2; do
        RUN_CUDA_NAME=cuda-run$n.json RUN_CUDA_ARGS="--rounds 20" \
            sh scripts/gpu/on_gpu.sh ${W}_pack2 "$OUT"
    done
    python3 scripts/gpu/torch_eager.py $MODELS --out "$OUT/torch_eager.json" ;;
table)
    python benchmarks/cuda_table.py ${W}_call2 \
        --commit-summary ${W}_call1/commit_summary.json ${TABLE:+--out $TABLE} ;;
*)
    echo "usage: sh scripts/gpu/recipe.sh prepare|time1|tuned|time2|table" >&2; exit 2 ;;
esac
