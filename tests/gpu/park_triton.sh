#!/bin/bash
# torch.compile and Triton under parked checkpoints, on a real GPU. Triton's
# launchers are built with -lcuda and call the driver by name; the
# interposer must hold those calls during a park as it holds the CUDA
# runtime's (tests/gpu/park_triton.py).
#   tests/gpu/park_triton.sh TOOLS OUT   (TOOLS/cs: cudasnap, libcudasnap-park.so)
# Checks, each a PASS or FAIL line, then "N passed, M failed":
#  1. the same results with and without the interposer: the compiled
#     model's output and a Triton kernel's state after 100 steps, bit for bit
#  2. under 'cudasnap run', the process is parkable (the interposer knows
#     every driver function Triton's launchers bind) - else why not
#  3. ROUNDS (3) parked checkpoints and restores while the worker runs the
#     compiled model and the Triton kernel back to back, then one through the
#     driver alone (--no-park): each exits 0, each parked one really parks,
#     and after each every step the worker made is in the state and the
#     compiled output is unchanged
#  4. side by side (not checked): a Triton launch and a compiled forward,
#     in microseconds, without and with the interposer
# Environment: ROUNDS, MIB (the Triton state, 256), PYTHON (python3).
set -u
T=$1; OUT=$2
CS=$T/cs/cudasnap
PY=${PYTHON:-python3}
export CUDASNAP_PARK_LIB=$T/cs/libcudasnap-park.so
HERE=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d /tmp/park-triton.XXXX)
mkdir -p "$OUT" || exit 2
pass=0; fail=0
ok() { echo "PASS $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
waitfile() { for _ in $(seq 1 900); do [ -s "$1" ] && return 0; sleep 0.2; done; return 1; }
field() { $PY -c 'import json,sys; o=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"o": o}))' "$@" 2>/dev/null; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'

# 1. the same results
$PY "$HERE/park_triton.py" --reference > "$OUT/ref-plain.json" 2> "$OUT/ref-plain.err"
$CS run -- $PY "$HERE/park_triton.py" --reference > "$OUT/ref-park.json" 2> "$OUT/ref-park.err"
if [ -s "$OUT/ref-plain.json" ] && [ "$(field "$OUT/ref-plain.json" 'o["output"], o["state"], o["state_ok"]')" = \
     "$(field "$OUT/ref-park.json" 'o["output"], o["state"], o["state_ok"]')" ] && \
   [ "$(field "$OUT/ref-park.json" 'o["preloaded"] and o["state_ok"]')" = True ]; then
	ok "same results with and without the interposer: $(cat "$OUT/ref-park.json")"
else
	bad "results differ: plain $(cat "$OUT/ref-plain.json") $(tail -3 "$OUT/ref-plain.err"); parked $(cat "$OUT/ref-park.json") $(tail -3 "$OUT/ref-park.err")"
fi

# 2. parkable
$CS run -- $PY "$HERE/park_triton.py" --dir "$D" --mib "${MIB:-256}" > "$OUT/workload.out" 2>&1 &
P=$!
if ! waitfile "$D/$P.ready"; then
	bad "workload did not start: $(tail -5 "$OUT/workload.out")"
	echo "$pass passed, $fail failed"; exit 1
fi
echo "ready: $(cat "$D/$P.ready")"
$CS ps --json > "$OUT/ps.json" 2>&1
park=$(field "$OUT/ps.json" '[p.get("park") for p in o["processes"] if p["pid"] == '"$P"'][0]')
case "$park" in
*"'parkable': True"*) ok "parkable under cudasnap run: $park" ;;
*) bad "not parkable: $park"; $CS ps ;;
esac

verify() { # label
	rm -f "$D/$P.verify"; kill -USR1 "$P"
	if waitfile "$D/$P.verify" && grep -q '^ok' "$D/$P.verify"; then ok "$1: $(cat "$D/$P.verify")"
	else bad "$1: $(cat "$D/$P.verify" 2>/dev/null) $(tail -3 "$OUT/workload.out")"; fi
}
cycle() { # label [--no-park]
	$CS checkpoint --pid "$P" ${2:-} --json > "$OUT/$1.ckpt.json" 2> "$OUT/$1.ckpt.err"; local rc1=$?
	$CS restore --pid "$P" --json > "$OUT/$1.rest.json" 2> "$OUT/$1.rest.err"; local rc2=$?
	local parked; parked=$(field "$OUT/$1.ckpt.json" '"park" in o["processes"][0]["seconds"]')
	echo "RESULT $1 checkpoint rc=$rc1 parked=$parked $(field "$OUT/$1.ckpt.json" 'o["processes"][0]["seconds"]') restore rc=$rc2 $(field "$OUT/$1.rest.json" 'o["processes"][0]["seconds"]')"
	if [ $rc1 != 0 ] || [ $rc2 != 0 ]; then bad "$1 rc $rc1/$rc2"; cat "$OUT/$1.ckpt.err" "$OUT/$1.rest.err"
	elif [ -z "${2:-}" ] && [ "$parked" != True ]; then bad "$1 did not park: $(cat "$OUT/$1.ckpt.err")"
	else ok "$1 checkpoint and restore"; fi
	verify "$1 data"
}

# 3. parked checkpoints while it works
verify before
for r in $(seq 1 "${ROUNDS:-3}"); do cycle "park$r"; done
cycle driver --no-park
kill "$P"; wait "$P" 2>/dev/null

# 4. side by side
for r in 1 2; do
	$PY "$HERE/park_triton.py" --bench | sed 's/^/BENCH plain /'
	$CS run -- $PY "$HERE/park_triton.py" --bench | sed 's/^/BENCH park /'
done
rm -rf "$D"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
