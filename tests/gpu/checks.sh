# Sourced by the GPU scripts: PASS/FAIL lines and their counts, and the
# data check of a workload that answers SIGUSR1 in $D/PID.verify
# (park_workload.py). WAIT_TICKS: how many 0.2 s waits for a file (600).
pass=0; fail=0
ok() { echo "PASS $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
waitfile() { for _ in $(seq 1 "${WAIT_TICKS:-600}"); do [ -s "$1" ] && return 0; sleep 0.2; done; return 1; }
verify() { # pid label
	rm -f "$D/$1.verify"; kill -USR1 "$1"
	if waitfile "$D/$1.verify" && grep -q '^ok' "$D/$1.verify"; then ok "$2: $(cat "$D/$1.verify")"; else bad "$2: $(cat "$D/$1.verify" 2>/dev/null)"; fi
}
