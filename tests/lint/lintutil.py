"""What the lint scripts share: stand-in programs, and the report."""
import os
import stat


def write_exe(path, text):
    """An executable file at path holding text (its folders made)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def report(bad):
    """Prints each failure and the verdict; the exit status."""
    for b in bad:
        print("FAIL", b)
    print("ok" if not bad else f"{len(bad)} failed")
    return 1 if bad else 0
