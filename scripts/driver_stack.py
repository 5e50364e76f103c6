#!/usr/bin/env python3
"""Writes park/driver_stack.inc: how many bytes of arguments each driver
entry point of park/driver_api.inc takes on the stack (System V x86-64), so
that the gate's trampoline copies exactly those and nothing past the
caller's stack (a makecontext stack's guard page).

The bytes are measured, not worked out from the types: for each function
the headers declare under exactly that name (as they are, per-thread
default stream, and the internal section that declares older versions), a
C++ program built with g++ calls a function of the same signature and sees
where each argument landed relative to its frame. A name the headers do
not declare exactly (a later driver's) is written U(name): the trampoline
copies GATE_STACK_ARGS bytes for it.

    scripts/driver_stack.py /usr/local/cuda/include > park/driver_stack.inc
"""
import os
import re
import subprocess
import sys
import tempfile

HEADERS = """#include <stdint.h>
typedef uint32_t VdpDevice; typedef uint32_t VdpVideoSurface; typedef uint32_t VdpOutputSurface;
typedef int VdpStatus; typedef VdpStatus VdpGetProcAddress(VdpDevice, uint32_t, void **);
#include <cuda.h>
#include <cudaGL.h>
#include <cudaEGL.h>
#include <cudaVDPAU.h>
#include <cudaProfiler.h>
"""

# Where each argument of a call landed: above the frame's return address
# (frame + 16 at -O0 with a frame pointer) is the caller's stack.
PROBE = """#include "hdrs.h"
#include <stdio.h>
#include <stddef.h>
template <class F> struct Probe;
template <class R, class... A> struct Probe<R (*)(A...)> {
	static size_t top;
	__attribute__((noinline)) static R fn(A... a)
	{
		char *above = (char *)__builtin_frame_address(0) + 16;
		top = 0;
		auto at = [&](void *p, size_t n) {
			char *c = (char *)p;
			size_t end = c >= above ? (size_t)(c - above + n + 7) & ~(size_t)7 : 0;
			top = end > top ? end : top;
		};
		(at((void *)&a, sizeof a), ...);
		return R();
	}
	static size_t run() { fn(A{}...); return top; }
};
template <class R, class... A> size_t Probe<R (*)(A...)>::top;
template <class F> size_t stack_of(F) { return Probe<F>::run(); }
int main()
{
"""

MODES = {"plain": [], "ptds": ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], "internal": ["-D__CUDA_API_VERSION_INTERNAL"]}


def measure(include, names, tmp):
    found = {}
    with open(os.path.join(tmp, "hdrs.h"), "w") as f:
        f.write(HEADERS)
    for mode, flags in MODES.items():
        pp = subprocess.run(["g++", "-E", "-P", "-x", "c++", "-I" + include, *flags, os.path.join(tmp, "hdrs.h")],
                            capture_output=True, text=True, check=True).stdout
        declared = set(re.findall(r"\bCUresult\s+(cu\w+)\s*\(", pp))
        want = [n for n in names if n in declared and n not in found]
        src, exe = os.path.join(tmp, f"probe_{mode}.cpp"), os.path.join(tmp, f"probe_{mode}")
        with open(src, "w") as f:
            f.write(PROBE)
            for n in want:
                f.write(f'\tprintf("%s %zu\\n", "{n}", stack_of((decltype(&{n}))0));\n')
            f.write("}\n")
        subprocess.run(["g++", "-O0", "-fno-omit-frame-pointer", "-std=c++17", "-w", "-I" + include, "-I" + tmp,
                        *flags, src, "-o", exe], check=True)
        for line in subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines():
            n, b = line.split()
            found[n] = int(b)
    return found


def version(include):
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", open(os.path.join(include, "cuda.h")).read())
    v = int(m.group(1)) if m else 0
    return "%d.%d" % (v // 1000, v % 1000 // 10)


def main():
    include = sys.argv[1]
    names = re.findall(r"^[NS]\((\w+)\)", open("park/driver_api.inc").read(), flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        found = measure(include, names, tmp)
    print("/* Bytes of stack arguments of each driver entry point of driver_api.inc")
    print(" * (System V x86-64), as measured from the headers of CUDA %s by" % version(include))
    print(" * scripts/driver_stack.py: K(name, bytes); U(name), a name those headers")
    print(" * do not declare, for which the trampoline copies GATE_STACK_ARGS bytes.")
    print(" * Sorted as driver_api.inc. */")
    for n in names:
        print("K(%s, %d)" % (n, found[n]) if n in found else "U(%s)" % n)


if __name__ == "__main__":
    main()
