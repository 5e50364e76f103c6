#!/bin/bash
# The CRIU plugin in real containers on a GPU machine, every way side by side
# (bench/container_bench.py), after what the machine is: driver, kernel,
# runtime (cudasnap doctor says whether it is gVisor), and the restore thread
# that the driver names for a process in another PID namespace.
#
#   bench/gpu_containers.sh TOOLS OUT [container_bench.py options...]
#
# TOOLS: runc (+ libseccomp in lib/), criu, cuda_plugin.so, NVIDIA's
# cuda-checkpoint, the built cudasnap and cudasnap_plugin.so (cs/) and the
# workload (bin/workload, tests/gpu/workload.cu; WORKLOAD=tests/gpu/park_workload.py
# runs PyTorch instead). OUT receives rows.json.
set -u
tools=$(cd "$1" && pwd)
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -r
nvidia-smi --query-gpu=name,driver_version,memory.total,persistence_mode --format=csv,noheader
"$tools/cs/cudasnap" doctor 2>&1 | grep -E 'driver|gvisor|container|pid namespace|persistence|settings' | head -12

# The container gets a copy of the driver's libraries: the machine's own
# driver directory may sit on a mount that CRIU cannot dump.
lib=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
drv=$(mktemp -d /tmp/drv.XXXXXX)
chmod 755 "$drv"
for f in "$(dirname "$lib")"/libcuda.so* "$(dirname "$lib")"/libnvidia-ml.so* \
	"$(dirname "$lib")"/libnvidia-ptxjitcompiler.so* "$(dirname "$lib")"/libnvidia-gpucomp.so*; do
	[ -e "$f" ] && cp -L "$f" "$drv/"
done
echo "driver copy from $(dirname "$lib"): $(ls "$drv" | tr '\n' ' ')"

echo "== containers"
python3 "$here/container_bench.py" --tools "$tools" --cudasnap "$tools/cs/cudasnap" \
	--plugin "$tools/cs/cudasnap_plugin.so" --workload "${WORKLOAD:-$tools/bin/workload}" --driver-dir "$drv" \
	--json "$out/rows.json" "$@"
rc=$?
rm -rf "$drv"
exit $rc
