#!/bin/bash
# A transaction over N fake CUDA processes (default 200) against the driver
# test double: checkpoint and restore wall time, no GPU needed.
# Usage: bench/cpu_txn.sh BUILD [N]   (BUILD is a meson build dir with tests)
set -eu
build=$(realpath "${1:?usage: $0 BUILD [N]}")
n=${2:-200}
if [ "${CUDASNAP_BENCH_INNER:-}" != 1 ] && unshare --pid --net --fork --mount-proc true 2>/dev/null; then
	CUDASNAP_BENCH_INNER=1 exec unshare --pid --net --fork --mount-proc "$0" "$@"
fi
dir=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null; rm -rf "$dir"' EXIT
mkdir "$dir/dev" "$dir/ready"
export CUDASNAP_DEV_DIR=$dir/dev CUDASNAP_STATE_DIR=$dir/state
export CUDASNAP_LIBCUDA=$build/tests/fake/libcuda.so.1 CUDASNAP_LIBNVML=$build/tests/fake/libnvidia-ml.so.1
# The double's model of GPU memory reads every process's fds in /proc at
# each NVML call and each restore's admission (O(n) a call, O(n^2) for a
# transaction): that would be measured, not cudasnap. A fixed figure of used
# memory is read in O(1); CUDASNAP_BENCH_ROOM=scan measures with the scan.
[ "${CUDASNAP_BENCH_ROOM:-}" = scan ] || export FAKECUDA_GPU_USED_MIB=0
for ((i = 0; i < n; i++)); do
	"$build/tests/fake/fakecuda-app" --mem 1 --ready-dir "$dir/ready" 2>/dev/null &
done
while [ "$(ls "$dir/ready" | grep -c '\.ready$')" -lt "$n" ]; do sleep 0.1; done
cs=$build/src/cudasnap
ms() { local t0; t0=$(date +%s%N); "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; echo $((($(date +%s%N) - t0) / 1000000)); }
# In a PID namespace of its own every CUDA process is one of these (--all);
# in the host's, where unshare was refused, they are named: this shell's tree.
sel=(--all) back=()
[ "${CUDASNAP_BENCH_INNER:-}" = 1 ] || sel=(--tree $$) back=(--tree $$)
c=$(ms "$cs" checkpoint "${sel[@]}")
r=$(ms "$cs" restore "${back[@]}")
echo "$(date -u +%F) $(nproc) cores: $n fake CUDA processes: checkpoint ${c} ms, restore ${r} ms (driver test double)"
