#!/bin/bash
# tests/gpu/safety.py on a GPU machine, after what the machine is.
#
#   tests/gpu/safety.sh TOOLS OUT [safety.py options...]
#
# TOOLS as bench/gpu_containers.sh lays it out (runc and libseccomp, criu,
# the built cudasnap and cudasnap_plugin.so in cs/); OUT receives safety.json.
# CHECKS=room runs tests/gpu/room.py instead (room.sh), into room.json.
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
"$tools/cs/cudasnap" doctor 2>&1 | grep -E 'driver-version|gvisor|container|pid-namespace|persistence' | head -8
w=$(mktemp -d /tmp/w.XXXXXX)
nvcc -O2 -arch=sm_90 -o "$w/workload" "$here/workload.cu" || exit 1
# The containers get a copy of the driver's libraries: the machine's own
# driver directory may sit on a mount that CRIU cannot dump.
lib=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
drv=$(mktemp -d /tmp/drv.XXXXXX)
chmod 755 "$drv" "$w"
for f in "$(dirname "$lib")"/libcuda.so* "$(dirname "$lib")"/libnvidia-ml.so* \
	"$(dirname "$lib")"/libnvidia-ptxjitcompiler.so* "$(dirname "$lib")"/libnvidia-gpucomp.so*; do
	[ -e "$f" ] && cp -L "$f" "$drv/"
done
checks=${CHECKS:-safety}
PYTHONUNBUFFERED=1 python3 "$here/$checks.py" --cudasnap "$tools/cs/cudasnap" --workload "$w/workload" \
	--tools "$tools" --plugin "$tools/cs/cudasnap_plugin.so" --driver-dir "$drv" --json "$out/$checks.json" "$@"
rc=$?
rm -rf "$drv" "$w"
exit $rc
