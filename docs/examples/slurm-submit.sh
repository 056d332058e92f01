#!/bin/bash
# Queues the shard array, then the merge, which waits for every shard:
#   docs/examples/slurm-submit.sh
set -euo pipefail
here=$(dirname "$0")
mkdir -p shards
array=$(sbatch --parsable "$here/slurm-tune-array.sbatch")
array=${array%%;*}  # --parsable prints "jobid[;cluster]"
sbatch --dependency=afterok:"$array" "$here/slurm-merge.sbatch"
echo "queued shards as job array $array and the merge after it"
