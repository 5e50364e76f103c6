"""cudasnap reads its environment in one place, lib/base/env.c, through
secure_getenv(3), so that a setuid or file-capability copy never honours a
variable chosen by whoever started it. Fails when any other source file of
lib/ or src/ names getenv, secure_getenv or environ (outside comments and
strings), and when a variable of env.c's list is missing from the ENVIRONMENT
section of the man page.

    env_reads.py SOURCE_ROOT
"""
import glob
import os
import re
import sys

ALLOWED = os.path.join("lib", "base", "env.c")
# Any mention, not only calls: a function pointer to getenv reads as much.
BANNED = ["getenv", "secure_getenv", "__secure_getenv", "environ", "__environ"]
WORD = re.compile(r"\b(" + "|".join(BANNED) + r")\b")
# Comments, string and character literals, so that prose does not count.
NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip(text):
    return NOISE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def scan_sources(root):
    bad = []
    files = sorted(glob.glob(os.path.join(root, "lib", "*", "*.[ch]")) + glob.glob(os.path.join(root, "src", "*.[ch]")))
    rels = [os.path.relpath(p, root) for p in files]
    if ALLOWED not in rels:
        bad.append(f"{ALLOWED} not found under {root}")
    for path, rel in zip(files, rels):
        if rel == ALLOWED:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            code = strip(f.read())
        for n, line in enumerate(code.splitlines(), 1):
            for m in WORD.finditer(line):
                bad.append(f"{rel}:{n}: reads the environment ({m.group(1)}); use cs_env() of lib/base/env.h")
    return bad, len(files)


def documented(root):
    """The variables of env.c's list."""
    with open(os.path.join(root, ALLOWED), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"documented\[\]\s*=\s*\{(.*?)\};", text, re.S)
    return re.findall(r'"([A-Z0-9_]+)"', m.group(1)) if m else []


def check_man_page(root):
    names = documented(root)
    if not names:
        return [f"{ALLOWED}: no list of documented variables found"]
    with open(os.path.join(root, "docs", "cudasnap.1.scd"), encoding="utf-8") as f:
        man = f.read()
    m = re.search(r"^# ENVIRONMENT$(.*?)^# ", man, re.S | re.M)
    section = m.group(1).replace("\\_", "_") if m else ""
    return [f"docs/cudasnap.1.scd: {name} is read (lib/base/env.c) but not in ENVIRONMENT"
            for name in names if name not in section]


def main():
    root = sys.argv[1]
    bad, nfiles = scan_sources(root)
    bad += check_man_page(root)
    for b in bad:
        print(b)
    print(f"{nfiles} source files scanned; {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
