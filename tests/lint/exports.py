"""libcudasnap.so exports exactly the functions that include/cudasnap.h
declares CS_PUBLIC: nothing internal leaks, nothing public is missing.

Usage: exports.py SOURCE_ROOT LIBCUDASNAP_SO"""
import re
import subprocess
import sys


def declared(header):
    """Every function the header declares, and those marked CS_PUBLIC."""
    text = re.sub(r"/\*.*?\*/", " ", open(header).read(), flags=re.S)
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
    every = set(re.findall(r"(?<!\(\*)\b(cs_[a-z0-9_]+)\s*\(", text))
    marked = set(re.findall(r"^CS_PUBLIC\b[^;]*?\b(cs_[a-z0-9_]+)\s*\(", text, re.M | re.S))
    return every, marked


def exported(so):
    out = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3 and line.split()[1] in "TW"}


def main():
    root, so = sys.argv[1], sys.argv[2]
    (want, marked), got = declared(f"{root}/include/cudasnap.h"), exported(so)
    if not want:
        print("no function declaration found in include/cudasnap.h")
        return 1
    for name in sorted(want - marked):
        print(f"declared in cudasnap.h without CS_PUBLIC: {name}")
    extra, missing = sorted(got - want), sorted(want - got)
    for name in extra:
        print(f"exported but not declared in cudasnap.h: {name}")
    for name in missing:
        print(f"declared in cudasnap.h but not exported: {name}")
    print(f"{len(want)} declared, {len(got)} exported")
    return 1 if extra or missing or want != marked else 0


if __name__ == "__main__":
    sys.exit(main())
