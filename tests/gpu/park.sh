#!/bin/bash
# Parking on a real GPU, side by side with the driver's path on the same
# processes: PyTorch processes of each size in GIBS run under 'cudasnap run';
# each round checkpoints and restores every one once with --no-park (the
# driver alone) and once parked, in alternating order (ORDER1, ORDER2; the
# mode "pinned" parks with CUDASNAP_PARK_PIN=keep), and verifies every
# byte after each restore. Then: what the interposer costs while idle, and
# torch.multiprocessing CUDA IPC under the interposer.
#   tests/gpu/park.sh TOOLS OUT [GIBS...]   (TOOLS/cs: cudasnap, libcudasnap-park.so)
set -u
T=$1; OUT=$2; shift 2
GIBS=${*:-16}
CS=$T/cs/cudasnap
export CUDASNAP_PARK_LIB=$T/cs/libcudasnap-park.so
D=$(mktemp -d /tmp/park.XXXX)
mkdir -p "$OUT" || exit 2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/checks.sh"
secs() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); t=o["processes"][0] if o.get("processes") else {}; print(o["outcome"], "%.3f" % o["wall_seconds"], json.dumps({k: round(v, 3) for k, v in t.get("seconds",{}).items()}), json.dumps(t.get("park")))' "$1" 2>/dev/null || echo "? ? ?"; }
cycle() { # pid mode label
	local flag="" pin=drop; [ "$2" = driver ] && flag=--no-park; [ "$2" = pinned ] && pin=keep
	CUDASNAP_PARK_PIN=$pin $CS checkpoint --pid "$1" $flag --json > "$OUT/$3.ckpt.json" 2> "$OUT/$3.ckpt.err"; local rc1=$?
	CUDASNAP_PARK_PIN=$pin $CS restore --pid "$1" --json > "$OUT/$3.rest.json" 2> "$OUT/$3.rest.err"; local rc2=$?
	echo "RESULT $3 checkpoint rc=$rc1 $(secs "$OUT/$3.ckpt.json") restore rc=$rc2 $(secs "$OUT/$3.rest.json")"
	[ $rc1 = 0 ] && [ $rc2 = 0 ] || { bad "$3 rc $rc1/$rc2"; cat "$OUT/$3.ckpt.err" "$OUT/$3.rest.err"; }
	verify "$1" "$3 data"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
for g in $GIBS; do
	$CS run -- python3 "$HERE/park_workload.py" --dir "$D" --gib "$g" > "$OUT/w$g.out" 2>&1 &
	P=$!
	waitfile "$D/$P.ready" || { bad "workload $g GiB did not start"; cat "$OUT/w$g.out"; continue; }
	$CS ps > "$OUT/ps$g.txt" 2>&1
	for r in $(seq 1 ${ROUNDS:-2}); do
		if [ $r = 1 ]; then order=${ORDER1:-driver park}; else order=${ORDER2:-park driver}; fi
		for m in $order; do cycle $P $m "g${g}r${r}$m"; done
	done
	kill $P; wait $P 2>/dev/null; rc=$?
	# SIGTERM ends it with 0: anything else, and what it wrote last, is shown
	[ $rc = 0 ] || { echo "NOTE workload $g GiB ended with status $rc after SIGTERM:"; tail -20 "$OUT/w$g.out"; }
done
# transformers: greedy decoding gives the same tokens after a checkpoint
# and restore, parked and through the driver alone
if [ -z "${NO_DECODE:-}" ]; then
	$CS run -- python3 "$HERE/park_decode.py" --dir "$D" > "$OUT/decode.out" 2>&1 &
	P=$!
	if waitfile "$D/$P.ready"; then
		echo "decode model: $(cat "$D/$P.ready")"
		cycle $P park decode-park
		cycle $P driver decode-driver
	else
		bad "decode did not start: $(tail -3 "$OUT/decode.out")"
	fi
	kill $P; wait $P
fi
# idle cost: allocation-heavy PyTorch, without and with the interposer;
# with expandable segments, PyTorch maps its own VMM memory (cuMemCreate,
# cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease all pass through it)
for r in $(seq 1 ${BENCH_ROUNDS:-2}); do
	python3 "$HERE/park_workload.py" --bench | sed 's/^/BENCH plain /'
	$CS run -- python3 "$HERE/park_workload.py" --bench | sed 's/^/BENCH park /'
	PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$HERE/park_workload.py" --bench | sed 's/^/BENCH plain-expandable /'
	PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $CS run -- python3 "$HERE/park_workload.py" --bench | sed 's/^/BENCH park-expandable /'
done
[ -n "${NO_IPC:-}" ] && { rm -rf "$D"; echo "$pass passed, $fail failed"; exit 0; }
# A plain-C pair (tests/gpu/ipc_pair.cu) under the interposer, sharing
# memory with cudaIpcGetMemHandle ("legacy") and as a VMM allocation's file
# descriptor the program passes itself ("vmm"): parked together, both come
# back with their data; the exporter alone is refused; the importer alone
# parks and comes back.
if command -v nvcc > /dev/null && nvcc -O2 -arch=sm_90 -o "$D/ipc_pair" "$HERE/ipc_pair.cu" -lcuda; then
	for kind in ${PAIR_KINDS:-legacy vmm}; do
	flag=; [ $kind = vmm ] && flag=--vmm
	rm -rf "$D/pair"; mkdir -p "$D/pair"
	$CS run -- "$D/ipc_pair" export --dir "$D/pair" --mib "${PAIR_MIB:-4096}" $flag > "$OUT/pair-$kind-e.out" 2>&1 & E=$!
	waitfile "$D/pair/$E.ready"
	$CS run -- "$D/ipc_pair" import --dir "$D/pair" $flag > "$OUT/pair-$kind-i.out" 2>&1 & I=$!
	waitfile "$D/pair/$I.ready" || cat "$OUT/pair-$kind-i.out"
	pverify() { for p in $E $I; do rm -f "$D/pair/$p.verify"; kill -USR1 $p; done
		for p in $E $I; do if waitfile "$D/pair/$p.verify" && grep -q '^ok' "$D/pair/$p.verify"; then ok "pair $kind $1 $p: $(cat "$D/pair/$p.verify")"; else bad "pair $kind $1 $p: $(cat "$D/pair/$p.verify" 2>/dev/null)"; fi; done; }
	pverify before
	$CS ps 2>&1 | grep -E "parking|CUDA IPC|$I|$E" | head -8
	$CS checkpoint --pid $E --pid $I --json > "$OUT/pair-$kind.ckpt.json" 2> "$OUT/pair-$kind.ckpt.err"; rc1=$?
	$CS restore --pid $E --pid $I --json > "$OUT/pair-$kind.rest.json" 2> "$OUT/pair-$kind.rest.err"; rc2=$?
	echo "RESULT pair-$kind checkpoint rc=$rc1 $(secs "$OUT/pair-$kind.ckpt.json") restore rc=$rc2 $(secs "$OUT/pair-$kind.rest.json")"
	[ $rc1 = 0 ] && [ $rc2 = 0 ] && ok "pair $kind together" || { bad "pair $kind together $rc1/$rc2"; cat "$OUT/pair-$kind.ckpt.err" "$OUT/pair-$kind.rest.err"; }
	pverify "after together"
	$CS checkpoint --pid $E > /dev/null 2> "$OUT/pair-$kind.e.err"; rc=$?
	[ $rc != 0 ] && grep -q "maps its memory" "$OUT/pair-$kind.e.err" && ok "pair $kind exporter alone refused (rc $rc): $(grep error "$OUT/pair-$kind.e.err" | head -2 | tr '\n' ' ')" || { bad "pair $kind exporter alone rc=$rc"; cat "$OUT/pair-$kind.e.err"; $CS restore --pid $E; }
	$CS checkpoint --pid $I > /dev/null 2> "$OUT/pair-$kind.i.err" && $CS restore --pid $I > /dev/null 2>> "$OUT/pair-$kind.i.err" && ok "pair $kind importer alone" || { bad "pair $kind importer alone"; cat "$OUT/pair-$kind.i.err"; }
	pverify "after importer alone"
	pkill -P $E; kill $I $E; wait $I $E
	done
fi
[ -n "${NO_TORCH_IPC:-}" ] && { rm -rf "$D"; echo "$pass passed, $fail failed"; exit 0; }
# CUDA IPC under the interposer: torch.multiprocessing shares a tensor
# (memory, which the interposer carries, and an interprocess event, which
# the driver restores): the pair checkpoints and restores as one tree
mkdir -p "$D/ipc"
$CS run -- python3 "$HERE/torch_ipc.py" --dir "$D/ipc" --mib "${TORCH_IPC_MIB:-4096}" > "$OUT/ipc.out" 2>&1 &
IP=$!
for _ in $(seq 1 300); do [ "$(ls "$D"/ipc/*.ready 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.2; done
tverify() {
	for f in "$D"/ipc/*.ready; do
		p=$(basename "$f" .ready); rm -f "$D/ipc/$p.verify"; kill -USR1 "$p"
		if waitfile "$D/ipc/$p.verify" && grep -q '^ok' "$D/ipc/$p.verify"; then ok "torch ipc $1 $(tr -d '\n' < "$f") $p: $(cat "$D/ipc/$p.verify")"; else bad "torch ipc $1 $p: $(cat "$D/ipc/$p.verify" 2>/dev/null) $(tail -3 "$OUT/ipc.out")"; fi
	done
}
tverify before
$CS ps > "$OUT/ps-ipc.txt" 2>&1; grep -E "parking|CUDA IPC" "$OUT/ps-ipc.txt"
$CS checkpoint --tree $IP --json > "$OUT/ipc.ckpt.json" 2> "$OUT/ipc.ckpt.err"; rc1=$?
$CS restore --tree $IP --json > "$OUT/ipc.rest.json" 2> "$OUT/ipc.rest.err"; rc2=$?
echo "RESULT torch-ipc checkpoint rc=$rc1 $(python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["outcome"], "%.3f" % o["wall_seconds"], [(t["pid"], {k: round(v, 3) for k, v in t.get("seconds", {}).items()}) for t in o.get("processes", [])])' "$OUT/ipc.ckpt.json" 2>/dev/null) restore rc=$rc2 $(python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["outcome"], "%.3f" % o["wall_seconds"], [(t["pid"], {k: round(v, 3) for k, v in t.get("seconds", {}).items()}) for t in o.get("processes", [])])' "$OUT/ipc.rest.json" 2>/dev/null)"
[ $rc1 = 0 ] && [ $rc2 = 0 ] && ok "torch ipc pair checkpointed and restored" || { bad "torch ipc pair $rc1/$rc2"; head -c 1500 "$OUT/ipc.ckpt.err" "$OUT/ipc.rest.err"; }
tverify after
pkill -TERM -P $IP; kill $IP; wait $IP
rm -rf "$D"
echo "$pass passed, $fail failed"
