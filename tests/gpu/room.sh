#!/bin/bash
# tests/gpu/room.py on a GPU machine, after what the machine is.
#
#   tests/gpu/room.sh TOOLS OUT [room.py options...]
#
# TOOLS as bench/gpu_containers.sh lays it out (runc and libseccomp, criu,
# the built cudasnap and cudasnap_plugin.so in cs/, the workload in
# bin/workload); OUT receives room.json.
set -u
tools=$(cd "$1" && pwd)
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -r
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,persistence_mode --format=csv,noheader
# The containers get a copy of the driver's libraries: the machine's own
# driver directory may sit on a mount that CRIU cannot dump.
lib=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
drv=$(mktemp -d /tmp/drv.XXXXXX)
chmod 755 "$drv"
for f in "$(dirname "$lib")"/libcuda.so* "$(dirname "$lib")"/libnvidia-ml.so* \
	"$(dirname "$lib")"/libnvidia-ptxjitcompiler.so* "$(dirname "$lib")"/libnvidia-gpucomp.so*; do
	[ -e "$f" ] && cp -L "$f" "$drv/"
done
PYTHONUNBUFFERED=1 python3 "$here/room.py" --cudasnap "$tools/cs/cudasnap" --workload "$tools/bin/workload" \
	--tools "$tools" --plugin "$tools/cs/cudasnap_plugin.so" --driver-dir "$drv" --json "$out/room.json" "$@"
rc=$?
rm -rf "$drv"
exit $rc
