#!/bin/sh
# On the GPU host, from the repository root: unpack a pack made by scripts/gpu/pack.py and run.
#
#   sh scripts/gpu/on_gpu.sh PACK_DIR RESULTS_DIR      # runtime route: time the dry-run builds
#                                                      # and the tuning batches' candidates
#   sh scripts/gpu/on_gpu.sh PACK_DIR --stash          # full route, once per part: keep the
#                                                      # part(s) in PACK_DIR, unpack when all
#                                                      # parts are there, print the PYTHONPATH
#
# Parts are kept in /tmp/tvm_pet_gpu until all of them are there, so copy the parts of the full
# route over one after another, running this for each.
set -eu
PACK=$1
MODE=${2:-benchmarks/results}
W=/tmp/tvm_pet_gpu
mkdir -p "$W/parts" "$W/site"
cp "$PACK"/pack.tar.xz.part* "$W/parts/"
cp "$PACK/parts.json" "$W/parts.json"
WANT=$(python3 -c "import json; print(len(json.load(open('$W/parts.json'))['parts']))")
HAVE=$(ls "$W/parts" | wc -l)
if [ "$HAVE" -lt "$WANT" ]; then
    echo "on_gpu.sh: $HAVE of $WANT parts here; copy the next part over and run this again"
    exit 0
fi
if [ ! -f "$W/unpacked" ]; then
    cat "$W"/parts/pack.tar.xz.part* | tar -xJf - -C "$W"
    # the apache-tvm-ffi wheel for this Python (a wheel is a zip; no pip, no network)
    python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('$W/site') for w in glob.glob('$W/wheels/*.whl')]"
    touch "$W/unpacked"
fi
if [ "$MODE" = "--stash" ]; then
    echo "full TVM unpacked: PYTHONPATH=$W/site:\$PWD python3 ..."
    PYTHONPATH="$W/site" python3 -c "import tvm; print('tvm', tvm.__version__, 'cuda', tvm.cuda(0).exist)"
    exit 0
fi
mkdir -p "$MODE"
export TVM_USE_RUNTIME_LIB=1 PYTHONPATH="$W/site"
# each step on its own: one that fails is reported, and the next still runs
if [ -d "$W/batch" ]; then  # tuning batches: every candidate timed (scripts/gpu/run_batch.py)
    for b in "$W"/batch/*; do
        python3 scripts/gpu/run_batch.py "$b" --out "$MODE/times_$(basename "$b").json" ${RUN_BATCH_ARGS:-} \
            || echo "on_gpu.sh: run_batch.py failed on $b (status $?)"
    done
fi
if [ -d "$W/dry" ]; then
    python3 scripts/gpu/run_cuda.py "$W"/dry/* --out "$MODE" ${RUN_CUDA_NAME:+--name "$RUN_CUDA_NAME"} ${RUN_CUDA_ARGS:-} \
        || echo "on_gpu.sh: run_cuda.py failed (status $?)"
fi
