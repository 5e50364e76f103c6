"""cudasnap never runs a program it did not get from its own command line:
nothing it reads from a target (comm, environ, paths) can reach exec. Fails
when any source file of lib/ or src/ calls a function that starts a program,
or when the built binary imports one, except for three exceptions:
src/run.c (cudasnap run -- PROGRAM) executes its own command line with
execvp, after refusing a setuid or file-capability copy (AT_SECURE);
lib/driver/gpuprobe.c forks and executes cudasnap's own binary (the path its
front-end registered: the command line's /proc/self/exe, the CRIU plugin's
installed cudasnap) with a fixed argument, to read the GPUs' free memory
from the driver in a fresh process where NVML is absent; and
lib/inspect/archive_child.c forks (and never executes anything) to read a
checkpoint archive within resource limits that the command itself must not
be bound by.

    no_exec.py SOURCE_ROOT [BINARY]
"""
import glob
import os
import re
import shutil
import subprocess
import sys

# Functions that run another program; fork/clone too, since cudasnap has no
# other reason to make a child.
BANNED = ["execl", "execlp", "execle", "execv", "execvp", "execvpe", "execve", "execveat", "fexecve",
          "system", "popen", "posix_spawn", "posix_spawnp", "fork", "vfork", "clone", "clone3"]
# The exceptions: file -> the functions it may call (and the binary imports).
ALLOWED = {os.path.join("src", "run.c"): {"execvp"}, os.path.join("lib", "driver", "gpuprobe.c"): {"fork", "execv"},
           os.path.join("lib", "inspect", "archive_child.c"): {"fork"}}
CALL = re.compile(r"\b(" + "|".join(BANNED) + r")\s*\(")
# Comments, string and character literals, so that prose does not count.
NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def scan_sources(root):
    bad = []
    files = sorted(glob.glob(os.path.join(root, "lib", "*", "*.[ch]")) + glob.glob(os.path.join(root, "src", "*.[ch]")))
    if not files:
        bad.append(f"no sources found under {root}")
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        code = NOISE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for n, line in enumerate(code.splitlines(), 1):
            for m in CALL.finditer(line):
                rel = os.path.relpath(path, root)
                if m.group(1) not in ALLOWED.get(rel, set()):
                    bad.append(f"{rel}:{n}: calls {m.group(1)}()")
    return bad, len(files)


def scan_binary(binary):
    nm = shutil.which("nm")
    if not nm or not binary:
        return []
    out = subprocess.run([nm, "-D", "--undefined-only", binary], capture_output=True, text=True, check=True).stdout
    imported = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    allowed = set().union(*ALLOWED.values())
    return [f"{binary} imports {name}" for name in sorted(imported & set(BANNED) - allowed)]


def main():
    bad, nfiles = scan_sources(sys.argv[1])
    bad += scan_binary(sys.argv[2] if len(sys.argv) > 2 else None)
    for b in bad:
        print(b)
    print(f"{nfiles} source files scanned; {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
