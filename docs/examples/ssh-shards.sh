#!/bin/bash
# A sharded sweep without a scheduler or MPI: one shard per host over ssh,
# each into a database on that host, copied back and merged here.
#   HOSTS="gpu1 gpu2 gpu3 gpu4" docs/examples/ssh-shards.sh
# Every host needs the same mlatune build and space at the same path
# (REMOTE_DIR), e.g. a shared file system or an rsync beforehand.
set -euo pipefail

read -r -a hosts <<< "${HOSTS:?set HOSTS to the hosts to use, e.g. HOSTS=\"gpu1 gpu2\"}"
REMOTE_DIR=${REMOTE_DIR:-$PWD}
SPACE=${SPACE:-search_spaces/fused_mla_attention.yaml}
SHAPES=${SHAPES:---shape B=4,T=1024,H=16,D=64,R=128}
DB=${DB:-mlatune.db}
count=${#hosts[@]}
mkdir -p shards

pids=()
for i in "${!hosts[@]}"; do
    host=${hosts[$i]}
    # Shards are numbered from 0; each host keeps its own file and log.
    # SHAPES is split into words on purpose (several --shape options), and
    # the command is expanded here, before ssh sends it.
    # shellcheck disable=SC2086,SC2029
    ssh "$host" "cd '$REMOTE_DIR' && build/mlatune tune '$SPACE' $SHAPES --seed 1 --shard $i/$count \
        --db /tmp/mlatune-shard-$i.db --quiet" > "shards/shard-$i.log" 2>&1 &
    pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "shard $i/$count on ${hosts[$i]} failed: see shards/shard-$i.log" >&2
        failed=1
    fi
done
[ "$failed" -eq 0 ] || exit 1

for i in "${!hosts[@]}"; do
    scp -q "${hosts[$i]}:/tmp/mlatune-shard-$i.db" "shards/shard-$i.db"
done
build/mlatune cache merge shards/shard-*.db --db "$DB"
build/mlatune report --db "$DB" --out "${DB%.db}-report.html"
