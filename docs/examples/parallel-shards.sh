#!/bin/bash
# The same with GNU parallel (one shard per host, at most one job per host):
#   HOSTS="gpu1,gpu2,gpu3,gpu4" docs/examples/parallel-shards.sh
# parallel runs `mlatune tune` on the hosts over ssh and brings each shard's
# database back (--return), then this merges them.
set -euo pipefail

HOSTS=${HOSTS:?set HOSTS to a comma-separated list of hosts}
SPACE=${SPACE:-search_spaces/fused_mla_attention.yaml}
DB=${DB:-mlatune.db}
IFS=, read -r -a hosts <<< "$HOSTS"
count=${#hosts[@]}
mkdir -p shards

# --workdir . runs in the same path on every host (a shared checkout);
# {} is the shard index, 0 .. count-1.
seq 0 $((count - 1)) | parallel --jobs 1 --sshlogin "$HOSTS" --workdir . \
    --return shards/shard-{}.db --halt now,fail=1 \
    build/mlatune tune "$SPACE" --shape B=4,T=1024,H=16,D=64,R=128 --seed 1 \
    --shard "{}/$count" --db shards/shard-{}.db --quiet

build/mlatune cache merge shards/shard-*.db --db "$DB"
build/mlatune report --db "$DB" --out "${DB%.db}-report.html"
