#!/bin/bash
# Parking into files on a real GPU (cudasnap checkpoint --park-to), side by
# side in one run:
#  1. the ceiling: dio-ceiling (bench/dio_ceiling.c) writes and reads GIB GiB
#     in 8 files of each directory with O_DIRECT (buffered where refused);
#  2. a PyTorch process of GIB GiB under 'cudasnap run' in a memory cgroup
#     with memory.max LIMIT: checkpointed into files of each directory and
#     restored, every byte verified, the cgroup's memory.peak read after each
#     step; today's park into host memory is refused there (it needs the
#     copy in the cgroup);
#  3. the same process without the limit, parked into host memory, for the
#     rates side by side (one process, a thread of it doing GPU work all
#     the while, as a server does: park_workload.py);
#  4. MANY (4) such processes of GIB/MANY GiB each, checkpointed and
#     restored together, into host memory and into files.
#   tests/gpu/park_files.sh TOOLS OUT "DIR..."   (TOOLS/cs: cudasnap,
#   libcudasnap-park.so, dio-ceiling; GIB (24), LIMIT (4G), ROUNDS (2) in the
#   environment; NO_LIMITED=1 leaves out 2; PARK_LIBS="NAME=PATH ..." runs 3.
#   with one workload per interposer built otherwise, their rounds taken in
#   turn, for a comparison in one run.)
set -u
T=$1; OUT=$2; DIRS=$3
GIB=${GIB:-24}; LIMIT=${LIMIT:-4G}
CS=$T/cs/cudasnap
export CUDASNAP_PARK_LIB=$T/cs/libcudasnap-park.so
D=$(mktemp -d /tmp/pf.XXXX)
mkdir -p "$OUT" || exit 2
HERE=$(cd "$(dirname "$0")" && pwd)
WAIT_TICKS=900
. "$HERE/checks.sh"
park_of() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); t=o["processes"][0] if o.get("processes") else {}; p=t.get("park") or {}; print(o["outcome"], "wall=%.3f" % o["wall_seconds"], " ".join("%s=%.3f" % kv for kv in t.get("seconds",{}).items()), "park_gbps=%.2f" % (p.get("copy_gbps") or 0), "files=%s" % json.dumps(p.get("files")))' "$1" 2>/dev/null || echo "? ? ?"; }
peak() { cat "$CG/memory.peak" 2>/dev/null || echo "?"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
uname -r
date -u
# 1. the ceiling of each directory
for dir in $DIRS; do
	mkdir -p "$dir" && chmod 0700 "$dir"
	df -h "$dir" | tail -1
	"$T/cs/dio-ceiling" "$dir" --gib "$GIB" --json > "$OUT/ceiling.$(basename "$dir").json" 2> "$OUT/ceiling.err" &&
		echo "CEILING $dir $(cat "$OUT/ceiling.$(basename "$dir").json")" || bad "ceiling $dir: $(cat "$OUT/ceiling.err")"
done
# 2. under a memory limit far below its GPU memory
CG=/sys/fs/cgroup/cs-parkfiles.$$
if [ -n "${NO_LIMITED:-}" ]; then
	echo "(no run under a memory limit)"
elif mkdir "$CG" 2>/dev/null && echo "$LIMIT" > "$CG/memory.max"; then
	echo 0 > "$CG/memory.swap.max" 2>/dev/null
	bash -c 'echo $$ > "$1/cgroup.procs" && exec "$2" run -- python3 "$3" --dir "$4" --gib "$5"' _ "$CG" "$CS" \
		"$HERE/park_workload.py" "$D" "$GIB" > "$OUT/w-limited.out" 2>&1 &
	P=$!
	if waitfile "$D/$P.ready"; then
		echo "limited workload $P: memory.max=$(cat "$CG/memory.max") memory.current=$(cat "$CG/memory.current") peak=$(peak)"
		$CS checkpoint --pid "$P" --json > "$OUT/limited.host.json" 2> "$OUT/limited.host.err"
		rc=$?
		[ $rc = 2 ] && ok "park into host memory refused under memory.max (rc 2): $(grep -m1 error: "$OUT/limited.host.err")" ||
			bad "park into host memory under memory.max: rc $rc $(tail -3 "$OUT/limited.host.err")"
		for dir in $DIRS; do
			l=limited.$(basename "$dir")
			$CS checkpoint --pid "$P" --park-to "$dir" --json > "$OUT/$l.ckpt.json" 2> "$OUT/$l.ckpt.err"; rc1=$?
			pk1=$(peak); du -sh "$dir" | sed "s/^/FILES $l /"
			$CS restore --pid "$P" --json > "$OUT/$l.rest.json" 2> "$OUT/$l.rest.err"; rc2=$?
			pk2=$(peak)
			echo "RESULT $l checkpoint rc=$rc1 $(park_of "$OUT/$l.ckpt.json") peak_after=$pk1"
			echo "RESULT $l restore rc=$rc2 $(park_of "$OUT/$l.rest.json") peak_after=$pk2"
			[ $rc1 = 0 ] && [ $rc2 = 0 ] && ok "$l rc 0/0" || { bad "$l rc $rc1/$rc2"; tail -5 "$OUT/$l.ckpt.err" "$OUT/$l.rest.err"; }
			[ "$(ls -A "$dir" | wc -l)" = 0 ] && ok "$l files removed" || bad "$l files left: $(ls "$dir")"
			verify "$P" "$l data"
			lim=$(numfmt --from=iec "$LIMIT")
			[ "$pk2" != "?" ] && [ "$pk2" -lt "$lim" ] && ok "$l memory.peak $pk2 < $lim" || bad "$l memory.peak $pk2 (limit $lim)"
			grep -q "oom_kill [1-9]" "$CG/memory.events" && bad "$l OOM kill: $(cat "$CG/memory.events")"
		done
	else
		bad "limited workload did not start: $(tail -5 "$OUT/w-limited.out")"
	fi
	kill $P 2>/dev/null; wait $P 2>/dev/null
	cat "$CG/memory.events" | tr '\n' ' ' | sed 's/^/EVENTS /'; echo
	rmdir "$CG"
else
	bad "no memory cgroup to limit the workload in ($CG)"
fi
# 3. without a limit: into host memory, and into files, side by side (each
# interposer of PARK_LIBS in a workload of its own, the rounds in turn)
LIBS=${PARK_LIBS:-main=$CUDASNAP_PARK_LIB}
declare -A PID_OF
first=
for lib in $LIBS; do
	name=${lib%%=*}
	CUDASNAP_PARK_LIB=${lib#*=} $CS run -- python3 "$HERE/park_workload.py" --dir "$D" --gib "$GIB" \
		> "$OUT/w-free.$name.out" 2>&1 &
	p=$!
	if waitfile "$D/$p.ready"; then PID_OF[$name]=$p; first=${first:-$name}; else
		bad "workload $name did not start: $(tail -5 "$OUT/w-free.$name.out")"; kill $p 2>/dev/null; fi
done
for r in $(seq 1 "${ROUNDS:-2}"); do
	for name in "${!PID_OF[@]}"; do
		P=${PID_OF[$name]}
		modes=$DIRS; [ "$name" = "$first" ] && modes="host $DIRS"
		for mode in $modes; do
			l=free.r$r.$(basename "$mode"); [ "$mode" = host ] || l=$l.$name
			flag=; [ "$mode" = host ] || flag="--park-to $mode"
			$CS checkpoint --pid "$P" $flag --json > "$OUT/$l.ckpt.json" 2> "$OUT/$l.ckpt.err"; rc1=$?
			$CS restore --pid "$P" --json > "$OUT/$l.rest.json" 2> "$OUT/$l.rest.err"; rc2=$?
			echo "RESULT $l checkpoint rc=$rc1 $(park_of "$OUT/$l.ckpt.json")"
			echo "RESULT $l restore rc=$rc2 $(park_of "$OUT/$l.rest.json")"
			[ $rc1 = 0 ] && [ $rc2 = 0 ] && ok "$l rc 0/0" || { bad "$l rc $rc1/$rc2"; tail -5 "$OUT/$l.ckpt.err" "$OUT/$l.rest.err"; }
			verify "$P" "$l data"
		done
	done
done
for P in "${PID_OF[@]}"; do kill "$P" 2>/dev/null; wait "$P" 2>/dev/null; done
# 4. many: MANY processes of GIB/MANY GiB each, checkpointed and restored
# together, into host memory and into files, side by side
MANY=${MANY:-4}
if [ "$MANY" -gt 1 ] && [ $((GIB / MANY)) -ge 1 ]; then
	Q=()
	for k in $(seq 1 "$MANY"); do
		$CS run -- python3 "$HERE/park_workload.py" --dir "$D" --gib $((GIB / MANY)) > "$OUT/w-many.$k.out" 2>&1 &
		Q+=($!)
	done
	SEL=()
	for q in "${Q[@]}"; do
		if waitfile "$D/$q.ready"; then SEL+=(--pid "$q"); else bad "many: workload $q did not start: $(tail -3 "$OUT"/w-many.*.out)"; fi
	done
	many_of() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); ps=o["processes"]; s=[t.get("seconds",{}) for t in ps]; g=[(t.get("park") or {}).get("copy_gbps") or 0 for t in ps]; print(o["outcome"], "wall=%.3f" % o["wall_seconds"], "park=%.3f" % max(x.get("park",0) for x in s), "unpark=%.3f" % max(x.get("unpark",0) for x in s), "gbps=" + ",".join("%.2f" % x for x in g), "bytes=%d" % sum((t.get("park") or {}).get("bytes") or 0 for t in ps))' "$1" 2>/dev/null || echo "? ? ?"; }
	for r in $(seq 1 "${ROUNDS:-2}"); do
		for mode in host $DIRS; do
			l=many.r$r.$(basename "$mode"); flag=; [ "$mode" = host ] || flag="--park-to $mode"
			$CS checkpoint "${SEL[@]}" $flag --json > "$OUT/$l.ckpt.json" 2> "$OUT/$l.ckpt.err"; rc1=$?
			$CS restore "${SEL[@]}" --json > "$OUT/$l.rest.json" 2> "$OUT/$l.rest.err"; rc2=$?
			echo "RESULT $l checkpoint rc=$rc1 $(many_of "$OUT/$l.ckpt.json")"
			echo "RESULT $l restore rc=$rc2 $(many_of "$OUT/$l.rest.json")"
			[ $rc1 = 0 ] && [ $rc2 = 0 ] && ok "$l rc 0/0" || { bad "$l rc $rc1/$rc2"; tail -5 "$OUT/$l.ckpt.err" "$OUT/$l.rest.err"; }
			for q in "${Q[@]}"; do verify "$q" "$l data of $q"; done
		done
	done
	for q in "${Q[@]}"; do kill "$q" 2>/dev/null; wait "$q" 2>/dev/null; done
fi
for dir in $DIRS; do rm -rf "${dir:?}"/cudasnap-gpumem.* "${dir:?}"/dio-ceiling.*; done
rm -rf "$D"
echo "$pass passed, $fail failed"
