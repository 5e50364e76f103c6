#!/bin/sh
# Installs the Debian/Ubuntu packages needed to build and test cudasnap.
# Does nothing when they are all present, so it is cheap to call often.
set -eu
# libcap2-bin: setcap, for the test that a file-capability cudasnap ignores
# its environment (tests/integration/test_secure_env.py).
# runc, podman: the container engines of tests/integration/test_containers.py
# (Podman as root with vfs storage: no uidmap or fuse-overlayfs); iptables:
# iptables-restore, which CRIU's network lock runs in a container's network
# namespace. pyflakes3: the lint of the Python in tests/ and bench/.
# libarchive13: what cudasnap inspect loads to read checkpoint archives
# (tests/integration/test_inspect.py).
pkgs="meson ninja-build gcc pkg-config libjson-c-dev libcmocka-dev python3 scdoc bash-completion cppcheck clang-tidy clang-format pyflakes3 valgrind libcap2-bin runc podman iptables libarchive13"
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
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
