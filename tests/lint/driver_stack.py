"""park/driver_stack.inc gives every name of park/driver_api.inc, in its
order, whole words of stack arguments (scripts/driver_stack.py writes it):
a name left out, or a count too small, would hand the driver arguments that
are not the caller's.

    driver_stack.py SOURCE_ROOT
"""
import re
import sys

from lintutil import report


def main():
    root = sys.argv[1]
    names = re.findall(r"^[NS]\((\w+)\)", open(f"{root}/park/driver_api.inc").read(), flags=re.M)
    rows = re.findall(r"^(?:K\((\w+), (\d+)\)|U\((\w+)\))$", open(f"{root}/park/driver_stack.inc").read(), flags=re.M)
    listed = [k or u for k, _, u in rows]
    bad = []
    if listed != names:
        missing = sorted(set(names) - set(listed))
        extra = sorted(set(listed) - set(names))
        bad.append(f"names differ from driver_api.inc: missing {missing[:5]}, extra {extra[:5]}, or out of order")
    for k, b, _ in rows:
        if k and (int(b) % 8 or int(b) > 128):
            bad.append(f"{k}: {b} bytes is not whole words up to 128")
    return report(bad)


if __name__ == "__main__":
    sys.exit(main())
