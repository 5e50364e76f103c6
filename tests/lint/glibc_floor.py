"""The interposer loads with the oldest C library it is promised to
(park/glibc_floor.h): it needs no glibc symbol version newer than FLOOR, it
names libpthread.so.0 and libdl.so.2 (where glibc before 2.34 defines the
pthread and dl functions it binds to their old versions), it exports none
of the stat functions it defines for itself, and the README states the
floor.

Usage: glibc_floor.py SOURCE_ROOT LIBCUDASNAP_PARK_SO"""
import re
import subprocess
import sys

from lintutil import report

FLOOR = (2, 28)


def version(name):
    return tuple(int(x) for x in name.split("_", 1)[1].split("."))


def main():
    root, so = sys.argv[1], sys.argv[2]
    bad = []
    out = subprocess.run(["readelf", "-W", "-V", "-d", so], capture_output=True, text=True, check=True).stdout
    needs = set(re.findall(r"Name: (GLIBC_\S+)", out.split(".gnu.version_r", 1)[-1]))
    if not needs:
        bad.append(f"{so}: no GLIBC version needed at all (readelf's output changed?)")
    for n in sorted(n for n in needs if not re.fullmatch(r"GLIBC_[0-9.]+", n)):
        bad.append(f"{so} needs {n}, which no numbered glibc release promises (GLIBC_ABI_DT_RELR: 2.36)")
    for n in sorted((n for n in needs if re.fullmatch(r"GLIBC_[0-9.]+", n)), key=version):
        if version(n) > FLOOR:
            bad.append(f"{so} needs {n}, newer than glibc {FLOOR[0]}.{FLOOR[1]}: bind it in park/glibc_floor.h")
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", out))
    for lib in ("libpthread.so.0", "libdl.so.2"):
        if lib not in needed:
            bad.append(f"{so} does not name {lib} (needed: {sorted(needed)})")
    syms = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True, check=True).stdout
    for name in ("fstat", "fstat64", "stat64"):
        if re.search(rf"\s{name}$", syms, re.M):
            bad.append(f"{so} exports {name}: the program's calls would reach the interposer's")
    with open(f"{root}/README.md", encoding="utf-8") as f:
        if f"glibc {FLOOR[0]}.{FLOOR[1]}" not in f.read():
            bad.append(f"README.md does not state glibc {FLOOR[0]}.{FLOOR[1]}")
    return report(bad)


if __name__ == "__main__":
    sys.exit(main())
