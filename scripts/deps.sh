#!/bin/sh
# Installs the Debian/Ubuntu packages needed to build and test cudasnap.
# Does nothing when they are all present, so it is cheap to call often.
set -eu
# libcap2-bin: setcap, for the test that a file-capability cudasnap ignores
# its environment (tests/integration/test_secure_env.py).
# runc, podman: the container engines of tests/integration/test_containers.py
# (Podman as root with vfs storage: no uidmap or fuse-overlayfs); iptables:
# iptables-restore, which CRIU's network lock runs in a container's network
# namespace. containerd (with ctr): the third engine there; the tests start
# their own daemon inside the test's private machine, never the package's
# service (see below). pyflakes3: the lint of the Python in tests/ and bench/.
# libsodium-dev: the MAC of each piece of GPU memory parked into files,
# linked into the interposer (libsodium.a: nothing of it is needed at run
# time). libxxhash-dev: a test's forgery of an unkeyed checksum (header
# only).
# libarchive13: what cudasnap inspect loads to read checkpoint archives
# (tests/integration/test_inspect.py).
pkgs="meson ninja-build gcc pkg-config libjson-c-dev libcmocka-dev python3 scdoc bash-completion cppcheck clang-tidy clang-format pyflakes3 valgrind libcap2-bin runc podman iptables containerd libarchive13 libsodium-dev libxxhash-dev"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "cudasnap: missing packages:$missing (run as root, or: sudo apt-get install$missing)" >&2
	exit 2
fi
export DEBIAN_FRONTEND=noninteractive
# No package may start a service here (containerd's maintainer scripts would
# start containerd.service under systemd, on the machine's own
# /run/containerd): a policy-rc.d that refuses every start, for the
# installation only, where the machine has none of its own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# cudasnap scripts/deps.sh: no service starts during the installation\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	trap 'rm -f "$policy"' EXIT
	trap 'exit 1' HUP INT TERM
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
