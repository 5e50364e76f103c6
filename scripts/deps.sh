#!/bin/sh
# Installs the Debian/Ubuntu packages that building cudasnap needs, and
# nothing else: no container engine, no service (tests/deps.sh installs
# what the test suite needs). Does nothing when they are all present.
#   scripts/deps.sh          as root, or it says what to install
set -eu
# libsodium-dev: the MAC of each piece of GPU memory parked into files,
# linked into the interposer (libsodium.a: nothing of it is needed at run
# time). scdoc: the man page. bash-completion: where the completion goes.
pkgs="meson ninja-build gcc pkg-config libjson-c-dev libsodium-dev scdoc bash-completion python3"
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/install-pkgs.sh" $pkgs
