#!/usr/bin/env python3
"""Writes park/driver_stack.inc from a cuda.h: how many bytes of arguments
each driver entry point of park/driver_api.inc takes on the stack under the
System V x86-64 calling convention, so that the gate's trampoline copies
exactly those (never past the caller's stack, e.g. a makecontext stack's
guard page).

    cd /usr/local/cuda/include
    scripts/driver_stack.py cuda.h cudaGL.h cudaEGL.h cudaVDPAU.h cudaProfiler.h > park/driver_stack.inc

A name gets the largest of its family's prototypes (its versions and
per-thread-stream forms: cuGetProcAddress hands one out by the family's
name); a name the header does not declare is written U(name):
the trampoline copies GATE_STACK_ARGS bytes for it, as before."""
import re
import sys

INT_REGS, SSE_REGS = 6, 8
# Types passed by value that are not one integer register: SSE, or a
# structure the ABI passes in memory (bytes). Everything else in the
# driver's prototypes is an integer, an enum, a handle or a pointer.
SSE = {"float", "double"}
MEMORY = {"CUipcMemHandle": 64, "CUipcEventHandle": 64}
TWO_INT = set()  # none today: CUmemLocation (two ints) fits one register


def prototypes(text, found):
    """Each declared name's parameter lists; a name the header renames with
    #define (cuGraphInstantiate is cuGraphInstantiateWithFlags) under both."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    for m in re.finditer(r"\bCUresult\s+CUDAAPI\s+(\w+)\s*\(([^;{]*?)\)\s*;", text, flags=re.S):
        found.setdefault(m.group(1), []).append(" ".join(m.group(2).split()))
    for m in re.finditer(r"^\s*#\s*define\s+(cu\w+)\s+(cu\w+)\s*$", text, flags=re.M):
        found.setdefault(m.group(2), []).extend(found.get(m.group(1), []))


def stack_bytes(params):
    ints = sses = stack = 0
    if params in ("", "void"):
        return 0
    for p in params.split(","):
        p = p.strip()
        if "*" in p or "[" in p or "(" in p:
            kind = "int"
        else:
            words = p.replace("const ", "").split()
            t = " ".join(words[:-1]) if len(words) > 1 else words[0]
            kind = "sse" if t in SSE else ("mem", MEMORY[t]) if t in MEMORY else "int"
        if kind == "int":
            ints += 1
            stack += 8 if ints > INT_REGS else 0
        elif kind == "sse":
            sses += 1
            stack += 8 if sses > SSE_REGS else 0
        else:
            stack += (kind[1] + 7) // 8 * 8
    return stack


def base(name):
    return re.sub(r"(_v\d+)?(_ptds|_ptsz)?$", "", name)


def main():
    protos = {}
    for h in sys.argv[1:]:
        prototypes(open(h).read(), protos)
    names = re.findall(r"^[NS]\((\w+)\)", open("park/driver_api.inc").read(), flags=re.M)
    by_base = {}
    for n, ps in protos.items():
        by_base.setdefault(base(n), []).extend(ps)
    print("/* Bytes of stack arguments of the driver entry points that take any")
    print(" * (System V x86-64), K(name, bytes); U(name): a name of driver_api.inc")
    print(" * the header did not declare, for which the trampoline copies")
    print(" * GATE_STACK_ARGS bytes. Written by scripts/driver_stack.py from the")
    print(" * cuda.h of CUDA %s; sorted as driver_api.inc. */" % version(sys.argv[1]))
    for n in names:
        ps = protos.get(n, []) + by_base.get(base(n), [])
        if not ps:
            print("U(%s)" % n)
            continue
        b = max(stack_bytes(p) for p in ps)
        if b:
            print("K(%s, %d)" % (n, b))


def version(path):
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", open(path).read())
    v = int(m.group(1)) if m else 0
    return "%d.%d" % (v // 1000, v % 1000 // 10)


if __name__ == "__main__":
    main()
