#!/bin/bash
# Runs docs/examples/slurm-tune-array.sbatch as the 8 tasks of a job array
# would (SLURM_ARRAY_TASK_* set, one after the other, by replay: no GPU, no
# Slurm), then slurm-merge.sbatch, and checks that the merged database holds
# the same best config and as many measurements as one unsharded sweep.
#   tests/cluster_scripts_check.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export MLATUNE="$build_dir/mlatune"
export SPACE="$source_dir/search_spaces/fused_mla_attention.yaml"
export OUT_DIR="$work/shards"
export DB="$work/merged.db"
export TUNE_OPTIONS="--shape B=2,T=32,H=4,D=16,R=24 --replay $source_dir/tests/data/h200_sweeps.csv --where SHAPE_BUCKETS==exact&&ALGORITHM<=tf32x3_2k"

for id in 0 1 2 3 4 5 6 7; do
    SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_COUNT=8 SLURM_ARRAY_TASK_MIN=0 \
        bash "$source_dir/docs/examples/slurm-tune-array.sbatch" 2> "task-$id.err" > /dev/null
    grep -q "mlatune: shard $id/8 (from SLURM_ARRAY_TASK_ID=$id, SLURM_ARRAY_TASK_COUNT=8" "task-$id.err" || {
        echo "task $id did not say which shard it took:" >&2
        cat "task-$id.err" >&2
        exit 1
    }
done
bash "$source_dir/docs/examples/slurm-merge.sbatch" > merge.out
test -s "$work/merged-report.html" || { echo "no report written" >&2; exit 1; }

# shellcheck disable=SC2086
"$MLATUNE" tune "$SPACE" $TUNE_OPTIONS --db "$work/full.db" --quiet > /dev/null 2>&1
best() { "$MLATUNE" cache best --db "$1" --json | python3 -c 'import json,sys; print(json.dumps([[e[k] for k in ("shape","config","median_us")] for e in json.load(sys.stdin)]))'; }
count() { "$MLATUNE" cache info --db "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["measurements"])'; }
if [ "$(best "$DB")" != "$(best "$work/full.db")" ]; then
    echo "best configs differ: merged $(best "$DB"), one sweep $(best "$work/full.db")" >&2
    exit 1
fi
if [ "$(count "$DB")" != "$(count "$work/full.db")" ] || [ "$(count "$DB")" != 1354 ]; then
    echo "measurements differ: merged $(count "$DB"), one sweep $(count "$work/full.db")" >&2
    exit 1
fi
echo "8 array tasks merged: $(count "$DB") measurements, the same best config as one sweep"
