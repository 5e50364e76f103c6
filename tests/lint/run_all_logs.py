"""tests/run-all.sh keeps its logs inside the build directories and still
ends with "N passed, N failed"; git ignores logs at the top of the tree.

Runs a copy of the script in a scratch tree, with stand-ins for meson, ninja
and tests/deps.sh that print what the real ones would.

    run_all_logs.py SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

from lintutil import write_exe

# meson setup fails for dirs named in FAIL_SETUP; meson test prints the
# summary block of a real run (3 ok, 1 failed).
FAKE_MESON = """#!/bin/sh
case "$1" in
setup)
	for f in $FAIL_SETUP; do [ "$2" = "$f" ] && { echo "setup of $2 failed"; exit 1; }; done
	mkdir -p "$2" && : >"$2/build.ninja" && echo "The Meson build system"
	;;
test)
	printf 'Ok:                 3   \\nExpected Fail:      0   \\nFail:               1   \\n'
	printf 'Unexpected Pass:    0   \\nSkipped:            0   \\nTimeout:            0   \\n'
	;;
esac
"""
FAKE_NINJA = "#!/bin/sh\necho 'ninja: no work to do.'\n"


def scratch_tree(root, tmp):
    tree = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(tree, "tests"))
    shutil.copy(os.path.join(root, "tests", "run-all.sh"), os.path.join(tree, "tests", "run-all.sh"))
    write_exe(os.path.join(tree, "tests", "deps.sh"), "#!/bin/sh\nexit 0\n")
    write_exe(os.path.join(tmp, "bin", "meson"), FAKE_MESON)
    write_exe(os.path.join(tmp, "bin", "ninja"), FAKE_NINJA)
    return tree


def run(tree, tmp, fail_setup=""):
    env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ.get("PATH", ""),
               FAIL_SETUP=fail_setup, RUN_ALL_CLANG="0")
    return subprocess.run(["bash", os.path.join(tree, "tests", "run-all.sh")], capture_output=True, text=True,
                          env=env, timeout=60)


def check_run(tree, tmp, fail_setup, want_last, want_logs):
    bad = []
    p = run(tree, tmp, fail_setup)
    lines = p.stdout.strip().splitlines()
    if not lines or lines[-1] != want_last:
        bad.append(f"last line {lines[-1:]!r}, want {want_last!r}")
    if p.returncode != 1:
        bad.append(f"exit status {p.returncode}, want 1")
    top = sorted(os.listdir(tree))
    if top != sorted(["tests", "build", "build-asan"]):
        bad.append(f"top of the tree holds {top}")
    for log in want_logs:
        if not os.path.isfile(os.path.join(tree, log)):
            bad.append(f"no {log}")
    if fail_setup and f"setup of {fail_setup} failed" not in p.stdout:
        bad.append("the failed setup's log was not shown")
    return bad


def check_gitignore(root):
    """Log names at the top of the tree are ignored (skipped outside a git checkout)."""
    git = shutil.which("git")
    if not git or not os.path.isdir(os.path.join(root, ".git")):
        return []
    names = ["build.build.log", "build.test.log", "build-asan.setup.log", "build-other.test.log"]
    p = subprocess.run([git, "-C", root, "check-ignore", "--no-index", *names], capture_output=True, text=True)
    ignored = set(p.stdout.split())
    return [f".gitignore does not cover {n}" for n in names if n not in ignored]


def main():
    root = sys.argv[1]
    bad = []
    with tempfile.TemporaryDirectory(prefix="cudasnap-runall-") as tmp:
        tree = scratch_tree(root, tmp)
        logs = [f"{d}/run-all.{k}.log" for d in ("build", "build-asan") for k in ("setup", "build", "test")]
        bad += check_run(tree, tmp, "", "6 passed, 2 failed", logs)
    with tempfile.TemporaryDirectory(prefix="cudasnap-runall-") as tmp:
        # A setup that fails writes its log before the directory has anything else.
        tree = scratch_tree(root, tmp)
        bad += check_run(tree, tmp, "build-asan", "3 passed, 2 failed", ["build-asan/run-all.setup.log"])
    bad += check_gitignore(root)
    for b in bad:
        print(b)
    print(f"{len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
