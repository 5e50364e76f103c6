#!/bin/sh
# Installs the Debian/Ubuntu packages named, those that are missing, without
# starting any service. Where there is no apt, or no root, says what to
# install and fails.
set -eu
missing=""
if command -v dpkg-query >/dev/null 2>&1; then
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
	done
	[ -z "$missing" ] && exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "cudasnap: this script installs Debian/Ubuntu packages, and there is no apt-get here." >&2
	echo "cudasnap: install the equivalents of:${missing:- $*}" >&2
	echo "cudasnap: (Fedora/RHEL: meson ninja-build gcc pkgconf json-c-devel libsodium-static scdoc ...)," >&2
	echo "cudasnap: then run the build commands of the README without this script." >&2
	exit 2
fi
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
	printf '#!/bin/sh\n# cudasnap scripts/install-pkgs.sh: no service starts during the installation\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	trap 'rm -f "$policy"' EXIT
	trap 'exit 1' HUP INT TERM
fi
apt-get update -qq
# never remove a package to make room for these (an engine already there)
apt-get install -y -qq --no-install-recommends --no-remove $missing >/dev/null
