#!/bin/bash
# Starts N idle processes (default 2000) and times 'cudasnap ps' over them.
# Usage: bench/cpu_discovery.sh BUILD/src/cudasnap [N] [RUNS]
set -eu
bin=${1:?usage: $0 BUILD/src/cudasnap [N] [RUNS]}
n=${2:-2000}
runs=${3:-10}
dir=$(mktemp -d)
trap 'kill $(cat "$dir"/pids) 2>/dev/null; rm -rf "$dir"' EXIT
for ((i = 0; i < n; i++)); do sleep 600 & echo $! >>"$dir/pids"; done
"$bin" ps >/dev/null # warm the page cache
best=999999 total=0
for ((r = 0; r < runs; r++)); do
	t0=$(date +%s%N)
	"$bin" ps >/dev/null
	t=$((($(date +%s%N) - t0) / 1000))
	total=$((total + t))
	((t < best)) && best=$t
done
scanned=$("$bin" ps --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["scanned"])')
echo "$(date -u +%F) $(nproc) cores: cudasnap ps over $scanned processes: best $((best / 1000)) ms, mean $((total / runs / 1000)) ms ($runs runs)"
