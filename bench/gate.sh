#!/bin/sh
# The cost of a driver call through the parking interposer's gate, side by
# side with the driver alone (the driver double of tests/fake), on 1 and 2
# threads: bench/gate.sh BUILD_DIR (default: build).
set -eu
build=${1:-build}
bench=$build/bench/gate-bench
lib=$build/park/libcudasnap-park.so
[ -x "$bench" ] && [ -r "$lib" ] || { echo "build $bench and $lib first (meson, tests enabled)" >&2; exit 2; }
export FAKECUDA_GPUS=GPU-fa4ec0da-0000-4000-8000-000000000001
# the double creates its device files only in a directory named for it
CUDASNAP_DEV_DIR=$(mktemp -d)
export CUDASNAP_DEV_DIR
trap 'rm -rf "$CUDASNAP_DEV_DIR"' EXIT
"$bench" > "$CUDASNAP_DEV_DIR/alone"
LD_PRELOAD=$lib "$bench" > "$CUDASNAP_DEV_DIR/gated"
paste "$CUDASNAP_DEV_DIR/alone" "$CUDASNAP_DEV_DIR/gated" | awk '
BEGIN { printf "%-9s %7s %10s %10s %10s\n", "how", "threads", "driver ns", "gated ns", "added ns" }
{ sub("threads=", "", $2); sub("ns_per_call=", "", $3); sub("ns_per_call=", "", $6)
  printf "%-9s %7s %10.2f %10.2f %10.2f\n", $1, $2, $3, $6, $6 - $3 }' 
