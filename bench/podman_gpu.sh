#!/bin/bash
# Podman on a GPU machine: one container of two CUDA processes started with
# `cudasnap run` (the parking interposer), checkpointed with
# --leave-running, checkpointed, and restored through runc, CRIU and
# cudasnap_plugin.so, data verified before and after each (tests/gpu/workload.cu).
#   bench/podman_gpu.sh TOOLS      (root; GIB=2 by default)
# TOOLS: bin/runc, bin/criu, lib/ (their libraries), pod/podman (or
# pod/podman.xz), pod/conmon and pod/lib/ (theirs), cs/cudasnap,
# cs/cudasnap_plugin.so, cs/libcudasnap-park.so. For the run it writes
# /etc/criu/runc.conf (the plugin's directory) and, where there is none,
# /etc/containers/policy.json, and puts back what was there afterwards.
# Machine quirks it works around (see docs/criu.md): rlimits that cannot be
# set (a runc wrapper drops them), no iptables (--network host), a driver
# mount below /usr (/usr bound without recursion).
set -u
T=$(cd "$1" && pwd); CS=$T/cs
HERE=$(cd "$(dirname "$0")/.." && pwd)
chmod +x $T/bin/* $CS/cudasnap $T/pod/conmon
W=$(mktemp -d /tmp/pod.XXXX); chmod 755 $W
if [ -e $T/pod/podman ]; then cp $T/pod/podman $W/podman; else xz -dc $T/pod/podman.xz > $W/podman; fi
chmod +x $W/podman
export PATH=$T/bin:$PATH
nvcc -O2 -arch=sm_90 -o $W/workload $HERE/tests/gpu/workload.cu || exit 1
lib=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
mkdir -p $W/drv $W/plugins $W/data $W/rootfs/{usr,proc,sys,dev,tmp,data,drv,work,cs}
for d in bin lib lib64 sbin; do ln -s usr/$d $W/rootfs/$d; done
for f in "$(dirname "$lib")"/libcuda.so* "$(dirname "$lib")"/libnvidia-ml.so* "$(dirname "$lib")"/libnvidia-ptxjitcompiler.so* "$(dirname "$lib")"/libnvidia-gpucomp.so*; do [ -e "$f" ] && cp -L "$f" $W/drv/; done
cp $CS/cudasnap_plugin.so $W/plugins/
mkdir -p /etc/criu; had_conf=0; [ -e /etc/criu/runc.conf ] && had_conf=1 && cp /etc/criu/runc.conf $W/runc.conf.saved
echo "libdir $W/plugins" > /etc/criu/runc.conf
had_pol=1; [ -e /etc/containers/policy.json ] || { had_pol=0; mkdir -p /etc/containers; echo '{"default":[{"type":"insecureAcceptAnything"}]}' > /etc/containers/policy.json; }
cleanup() { P rm -f pc > /dev/null 2>&1; if [ $had_conf = 1 ]; then cp $W/runc.conf.saved /etc/criu/runc.conf; else rm -f /etc/criu/runc.conf; fi; [ $had_pol = 1 ] || rm -f /etc/containers/policy.json; rm -rf $W; }
# podman gives its helpers a clean environment: they find their libraries through wrappers
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$T/pod/lib:$T/lib" "$T/pod/conmon" > $W/conmon; chmod +x $W/conmon
# a machine that refuses the rlimits podman always sets (prlimit of the container's init: EPERM):
# the wrapper drops them from the bundle before runc sees it
cat > $W/runc <<WRAP
#!/bin/sh
b=""; prev=""; for a in "\$@"; do [ "\$prev" = "--bundle" ] && b="\$a"; prev="\$a"; done
[ -n "\$b" ] && [ -f "\$b/config.json" ] && python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['process'].pop('rlimits', None); json.dump(c, open(p, 'w'))" "\$b/config.json"
LD_LIBRARY_PATH=$T/lib PATH=$T/bin:\$PATH exec $T/bin/runc "\$@"
WRAP
chmod +x $W/runc
P() { LD_LIBRARY_PATH=$T/pod/lib $W/podman --root $W/root --runroot $W/runroot --tmpdir $W/libpod --storage-driver vfs --cgroup-manager cgroupfs --events-backend file --conmon $W/conmon --runtime $W/runc "$@"; }
devs=""; for d in /dev/nvidia*; do [ -c $d ] && devs="$devs --device $d"; done
GIB=${GIB:-2}
P version 2>&1 | head -3
tar -C $W/rootfs -cf $W/rootfs.tar . && P import --quiet $W/rootfs.tar localhost/cs:latest > /dev/null || echo "import failed"
hn=$(ulimit -Hn); hu=$(ulimit -Hu); [ "$hu" = unlimited ] && hu=1048576
P run -d --name pc --network host --ulimit nofile=$hn:$hn --ulimit nproc=$hu:$hu $devs -v /usr:/usr:ro,bind -v $W/drv:/drv:ro -v $W:/work:ro -v $CS:/cs:ro -v $W/data:/data \
  -e LD_LIBRARY_PATH=/drv --cap-add SYS_PTRACE localhost/cs:latest /bin/sh -c "for i in 1 2; do /cs/cudasnap run -- /work/workload --gib $GIB --dir /data & done; wait" > $W/run.out 2>&1
rc=$?; echo "run rc=$rc $(tail -2 $W/run.out)"; [ $rc = 0 ] || { cleanup; exit 1; }
for _ in $(seq 300); do [ $(ls $W/data/*.ready 2>/dev/null | wc -l) -ge 2 ] && break; sleep 0.2; done
hostpids() { local init ns; init=$(P inspect -f '{{.State.Pid}}' pc); ns=$(readlink /proc/$init/ns/pid)
  for d in /proc/[0-9]*; do [ "$(readlink $d/ns/pid 2>/dev/null)" = "$ns" ] || continue; i=$(awk '/^NSpid/{print $NF}' $d/status 2>/dev/null); [ -n "$i" ] && [ -e $W/data/$i.ready ] && echo "${d#/proc/}:$i"; done; }
verify() { local hp; for hp in $(hostpids); do rm -f $W/data/${hp##*:}.verify; kill -USR1 ${hp%%:*}; done
  for _ in $(seq 100); do [ $(ls $W/data/*.verify 2>/dev/null | wc -l) -ge 2 ] && break; sleep 0.2; done
  echo "verify $1: hosts $(hostpids | tr '\n' ' ') $(cat $W/data/*.verify 2>/dev/null | tr '\n' ' ')"; }
verify before
$CS/cudasnap ps 2>&1 | grep -E "parking|workload"
s() { local t0=$(date +%s.%N); "$@"; local rc=$?; echo "rc=$rc $(python3 -c "import time; print('%.2f s' % (time.time() - $t0))")"; }
echo "checkpoint -R: $(s P container checkpoint --leave-running --keep pc 2>&1 | tail -3 | tr '\n' ' ')"
grep -hE "Error|Warn|notify|Running|action" $W/root/vfs-containers/*/userdata/dump.log 2>/dev/null | grep -v RLIMIT | head -12 | cut -c1-250
grep -hE "cudasnap:" $W/root/vfs-containers/*/userdata/dump.log 2>/dev/null | tail -4 | cut -c1-250
verify after-R
echo "checkpoint: $(s P container checkpoint --keep pc 2>&1 | tail -3 | tr '\n' ' ')"
grep -hE "cudasnap:" $W/root/vfs-containers/*/userdata/dump.log 2>/dev/null | grep -E "parked|checkpointed" | tail -4 | cut -c1-250
echo "restore: $(s P container restore --keep pc 2>&1 | tail -3 | tr '\n' ' ')"
grep -hE "cudasnap:|Error" $W/root/vfs-containers/*/userdata/restore.log 2>/dev/null | tail -6 | cut -c1-250
sleep 1; verify after-restore
$CS/cudasnap ps 2>&1 | grep -E "parked|workload"
cleanup
