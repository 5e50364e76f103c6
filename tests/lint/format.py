"""The C sources follow .clang-format: lib/ (its layers), src/, include/, criu/ and park/

Usage: format.py SOURCE_ROOT CLANG_FORMAT"""
import glob
import subprocess
import sys


def main():
    root, tool = sys.argv[1], sys.argv[2]
    files = sorted(f for d in ("lib/*", "src", "include", "criu", "park") for ext in ("c", "h")
                   for f in glob.glob(f"{root}/{d}/*.{ext}"))
    if not files:
        print("no source file found")
        return 1
    p = subprocess.run([tool, "--dry-run", "--Werror", f"--style=file:{root}/.clang-format", *files],
                       capture_output=True, text=True)
    out = (p.stdout + p.stderr).strip()
    if out:
        print(out[-20000:])
        print(f"\nreformat with: clang-format -i {' '.join(f[len(root) + 1:] for f in files[:3])} ...")
    print(f"{len(files)} files checked")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
