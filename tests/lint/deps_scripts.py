"""scripts/deps.sh installs only what the build needs, tests/deps.sh adds
the test packages and the container engines, and neither replaces an
engine already there nor removes a package; without apt they say what to
install.

Runs copies of the scripts with stand-ins for dpkg-query (reports the
packages of $INSTALLED), apt-get (records its arguments) and id.

    deps_scripts.py SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys

from lintutil import report, write_exe
import tempfile

FAKE_DPKG = """#!/bin/sh
for a; do last=$a; done
for p in $INSTALLED; do [ "$p" = "$last" ] && { printf 'install ok installed'; exit 0; }; done
exit 1
"""
FAKE_APT = """#!/bin/sh
echo "$@" >> "$APT_LOG"
"""
FAKE_ID = "#!/bin/sh\necho 0\n"


def run(root, tmp, script, installed="", apt=True):
    bindir = os.path.join(tmp, "bin-apt" if apt else "bin-noapt")
    write_exe(os.path.join(bindir, "dpkg-query"), FAKE_DPKG)
    write_exe(os.path.join(bindir, "id"), FAKE_ID)
    if apt:
        write_exe(os.path.join(bindir, "apt-get"), FAKE_APT)
    log = os.path.join(tmp, "apt.log")
    if os.path.exists(log):
        os.unlink(log)
    # a PATH without the machine's own apt-get: the stand-ins and the shell's tools
    tools = os.path.join(tmp, "tools")
    os.makedirs(tools, exist_ok=True)
    for t in ("sh", "grep", "dirname", "printf", "chmod", "rm", "cat"):
        if not os.path.exists(os.path.join(tools, t)) and shutil.which(t):
            os.symlink(shutil.which(t), os.path.join(tools, t))
    env = {"PATH": bindir + os.pathsep + tools, "INSTALLED": installed, "APT_LOG": log}
    p = subprocess.run(["sh", os.path.join(root, script)], capture_output=True, text=True, env=env, timeout=60)
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    return p, calls


def main():
    root = sys.argv[1]
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        p, calls = run(root, tmp, "scripts/deps.sh")
        install = [c for c in calls if c.startswith("install")]
        if p.returncode != 0 or len(install) != 1:
            bad.append(f"scripts/deps.sh: rc {p.returncode}, apt calls {calls}, {p.stderr}")
        else:
            words = install[0].split()
            for engine in ("runc", "podman", "containerd", "libcmocka-dev"):
                if engine in words:
                    bad.append(f"scripts/deps.sh installs {engine}, which the build does not need: {install[0]}")
            if "--no-remove" not in words:
                bad.append(f"scripts/deps.sh may remove packages: {install[0]}")
        p, calls = run(root, tmp, "tests/deps.sh")
        words = " ".join(c for c in calls if c.startswith("install")).split()
        for want in ("runc", "podman", "containerd", "libcmocka-dev", "--no-remove"):
            if want not in words:
                bad.append(f"tests/deps.sh on a machine without an engine does not install {want}: {calls}")
        p, calls = run(root, tmp, "tests/deps.sh", installed="containerd.io docker-ce")
        words = " ".join(c for c in calls if c.startswith("install")).split()
        for engine in ("runc", "podman", "containerd"):
            if engine in words:
                bad.append(f"tests/deps.sh installs {engine} beside Docker's containerd.io: {calls}")
        if "libcmocka-dev" not in words or "containerd.io" not in p.stderr:
            bad.append(f"tests/deps.sh beside Docker: {calls}, said {p.stderr!r}")
        p, calls = run(root, tmp, "scripts/deps.sh", apt=False)
        if p.returncode != 2 or "no apt-get here" not in p.stderr or "libjson-c-dev" not in p.stderr:
            bad.append(f"scripts/deps.sh without apt: rc {p.returncode}, said {p.stderr!r}")
    return report(bad)


if __name__ == "__main__":
    sys.exit(main())
