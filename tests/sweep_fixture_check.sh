#!/bin/bash
# scripts/sweep-fixture, end to end without a GPU: a sweep replayed from the
# shipped fixture is exported in two parts (as two runs stopped by a time
# limit would leave it), packed into one fixture, and
#   - the pack is byte-for-byte reproducible and carries its note lines;
#   - replaying the pack finds the same best config as replaying the source;
#   - a config exported twice is refused (exit 2, saying which);
#   - `left` lists exactly the valid configs a fixture lacks, the family with
#     the fastest recorded config first under --fast-first;
#   - `record --dry-run` reports the same, and `record` without a GPU stops
#     after one config with a clear error and writes no part.
#   tests/sweep_fixture_check.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mlatune="$build_dir/mlatune"
tool="$source_dir/scripts/sweep-fixture"
space="$source_dir/search_spaces/fused_mla_attention.yaml"
fixture="$source_dir/tests/data/h200_sweeps_2026-12.csv.gz"
shape=B=2,T=32,H=4,D=16,R=24
fail() { echo "sweep_fixture_check: $*" >&2; exit 1; }

best_of() {  # replay FILE's shape by brute force; print the best config
  rm -f best.db
  "$mlatune" tune "$space" --replay "$1" --shape $shape --strategy brute_force --db best.db -q > best.out 2>&1 ||
    { cat best.out >&2; fail "replay of $1 failed"; }
  grep "best in the database" best.out | sed 's/.*) *//'
}

# Two runs: replay the whole shape, then split its export by row, every
# fifth row to the first part, so that each part holds every family.
"$mlatune" tune "$space" --replay "$fixture" --shape $shape --strategy brute_force --db whole.db -q > /dev/null 2>&1
"$mlatune" cache export --db whole.db --format csv -o whole.csv
total=$(($(wc -l < whole.csv) - 1))
[ "$total" -gt 1000 ] || fail "the replay exported only $total rows"
awk 'NR == 1 || NR % 5 == 2' whole.csv > part1.csv
awk 'NR == 1 || NR % 5 != 2' whole.csv > part2.csv
first=$(($(wc -l < part1.csv) - 1))

# The where lines are the source fixture's own (what it never measured, by
# shape where they name shape variables), if it has any: a fixture that
# records the whole space has none.  All of them go into the pack's note.
zcat "$fixture" | awk '/^# where: / { sub(/^# /, ""); print }' > where.txt
{ echo 'Made by tests/sweep_fixture_check.sh.'; if [ -s where.txt ]; then cat where.txt; else echo 'The source recorded the whole space.'; fi; } > note.txt
"$tool" pack packed.csv.gz part1.csv part2.csv --note note.txt > pack.out
"$tool" pack again.csv.gz part1.csv part2.csv --note note.txt > /dev/null
cmp -s packed.csv.gz again.csv.gz || fail "two packs of the same exports differ"
zcat packed.csv.gz | sed -n "1,$(($(wc -l < note.txt) + 1))p" > head.txt
grep -qx '# Made by tests/sweep_fixture_check.sh.' head.txt || fail "the note's first line is missing: $(cat head.txt)"
while IFS= read -r where; do
  grep -qxF "# $where" head.txt || fail "the line '$where' is missing"
done < where.txt
grep -qx 'shape,config,outcome,median_us,min_us,p90_us,relative_l2' head.txt || fail "unexpected header"
[ "$(zcat packed.csv.gz | grep -vc '^#')" -eq $((total + 1)) ] || fail "the pack lost or gained rows"

source_best=$(best_of "$fixture")
packed_best=$(best_of packed.csv.gz)
[ -n "$source_best" ] || fail "no best config in the replay's report"
[ "$source_best" = "$packed_best" ] || fail "best differs: $source_best against $packed_best"

if "$tool" pack twice.csv.gz part1.csv part1.csv 2> twice.err; then fail "a config packed twice was accepted"; fi
grep -q "is in part1.csv and in part1.csv; keep one" twice.err || fail "unclear refusal: $(cat twice.err)"

# `left` against the first part only.
"$tool" pack first.csv.gz part1.csv > /dev/null
export MLATUNE_BUILD_DIR="$build_dir"
"$tool" left "$space" $shape first.csv.gz --fast-first ALGORITHM > left.txt 2> left.err
"$mlatune" space list "$space" --shape $shape > valid.txt
[ $(($(wc -l < left.txt) + first)) -eq "$(wc -l < valid.txt)" ] || fail "left lists $(wc -l < left.txt), expected $(($(wc -l < valid.txt) - first))"
sort left.txt > left.sorted
python3 -c 'import csv,sys; [print(r["config"]) for r in csv.DictReader(sys.stdin)]' < part1.csv | sort > part1.configs
comm -12 left.sorted part1.configs > both.txt
[ -s both.txt ] && fail "left lists a recorded config: $(head -n 1 both.txt)"
sort valid.txt > valid.sorted
[ "$(sort -m left.sorted part1.configs | sort -u | wc -l)" -eq "$(wc -l < valid.sorted)" ] || fail "left and the record do not cover the space"
# The first listed family: one never recorded, else the one with the fastest recorded config.
first_family=$(head -n 1 left.txt | cut -d, -f1)
expected=$(python3 - part1.csv left.txt <<'PY'
import csv, sys
best = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["outcome"] == "ok":
        fam = r["config"].split(",")[0]
        best[fam] = min(best.get(fam, 1e300), float(r["median_us"]))
left = [l.split(",")[0] for l in open(sys.argv[2]) if l.strip()]
never = [f for f in dict.fromkeys(left) if f not in best]
print(never[0] if never else min((best[f], f) for f in set(left))[1])
PY
)
[ "$first_family" = "$expected" ] || fail "left starts with $first_family, expected $expected"
grep -q "not recorded" left.err || fail "left did not say how many it lists"

# `record --dry-run` says what `left` lists, and picks anchors among recorded configs.
"$tool" record "$space" rec first.csv.gz --shape $shape --anchors 3 --dry-run > dry.out
grep -qx "$shape: $(wc -l < left.txt) of $(wc -l < valid.txt) valid configs left, first $(head -n 1 left.txt)" dry.out ||
  fail "record --dry-run disagrees with left: $(cat dry.out)"
grep -qx "$shape: 6 anchors" dry.out || fail "record --dry-run chose other anchors: $(cat dry.out)"
[ ! -e rec/record.db ] || fail "a dry run made a database"
# Without a GPU, `tune` measures nothing: record says so after one config and writes no part.
if ! command -v nvidia-smi > /dev/null; then
  if "$tool" record "$space" rec first.csv.gz --shape $shape > rec.out 2> rec.err; then fail "record without a GPU succeeded"; fi
  grep -q "the first config was not measured (no GPU?" rec.err || fail "unclear refusal: $(cat rec.err)"
  ls rec/part_* > /dev/null 2>&1 && fail "record without a GPU wrote a part"
fi
echo "sweep_fixture_check: ok ($total rows packed; $(wc -l < left.txt) left after $first; $first_family first)"
