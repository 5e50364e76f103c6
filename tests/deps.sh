#!/bin/sh
# Installs what the test suite needs beyond the build (scripts/deps.sh):
# the test libraries and linters, and the container engines the container
# tests drive (runc, Podman, containerd), each only where it replaces no
# engine already installed. Cases of an engine not installed are skipped,
# saying why.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/deps.sh"
# libcmocka-dev: the unit tests. libcap2-bin: setcap, for the test that a
# file-capability cudasnap ignores its environment. pyflakes3, cppcheck,
# clang-tidy, clang-format: the lints. clang: a second compiler's build. valgrind: a memory check.
# libxxhash-dev: a test's forgery of an unkeyed checksum (header only).
# libarchive13: what cudasnap inspect loads to read checkpoint archives.
# iptables: iptables-restore, which CRIU's network lock runs in a
# container's network namespace. zsh, fish: the completions' tests.
# python3-yaml: the lint of the guides' Kubernetes manifests.
pkgs="libcmocka-dev cppcheck clang clang-tidy clang-format pyflakes3 valgrind libcap2-bin libarchive13 libxxhash-dev iptables zsh fish python3-yaml"
# The engines: Debian's runc, podman and containerd conflict with Docker's
# containerd.io (and with Podman's own builds): where such a package is
# installed, the engine it conflicts with is not installed.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
skip=""
for other in containerd.io docker-ce moby-containerd moby-runc; do
	command -v dpkg-query >/dev/null 2>&1 && installed "$other" && skip="$skip $other"
done
if [ -n "$skip" ]; then
	echo "cudasnap: tests/deps.sh: not installing runc, podman or containerd beside${skip}:" \
		"their container cases run with the engines already there, or are skipped" >&2
else
	# runc, podman: Podman as root with vfs storage (no uidmap or
	# fuse-overlayfs); containerd (with ctr): the tests start their own
	# daemon inside the test's private machine, never the package's service.
	pkgs="$pkgs runc podman containerd"
fi
exec "$here/scripts/install-pkgs.sh" $pkgs
