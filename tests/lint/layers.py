"""lib/ is built in layers (lib/README.md): each folder may include the
headers of the folders before it in the order given, and its own, never one
after it; and no header's includes lead back to it. Fails naming every
include that runs up, every circle, and any source outside a listed folder.

Usage: layers.py SOURCE_ROOT LAYER...   (the layers, lowest first; peers
that may not include each other joined with '+': engine+onecall)"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    root, levels = sys.argv[1], sys.argv[2:]
    lib = os.path.join(root, "lib")
    rank = {layer: i for i, level in enumerate(levels) for layer in level.split("+")}
    order = [layer for level in levels for layer in level.split("+")]
    where, bad = {}, []
    for entry in sorted(os.listdir(lib)):
        path = os.path.join(lib, entry)
        if os.path.isdir(path) and entry not in rank:
            bad.append(f"lib/{entry}/ is no layer of the list: {' '.join(order)}")
        elif not os.path.isdir(path) and entry.endswith((".c", ".h")):
            bad.append(f"lib/{entry} lies in no layer")
    for layer in order:
        for name in sorted(os.listdir(os.path.join(lib, layer))):
            if name.endswith((".c", ".h")):
                if name in where:
                    bad.append(f"{name} is in lib/{where[name]}/ and lib/{layer}/")
                where[name] = layer
    edges = {}
    for name, layer in sorted(where.items()):
        with open(os.path.join(lib, layer, name), encoding="utf-8", errors="replace") as f:
            incs = [os.path.basename(i) for i in INCLUDE.findall(f.read())]
        edges[name] = [i for i in incs if i in where]
        for inc in edges[name]:
            if rank[where[inc]] > rank[layer]:
                bad.append(f"lib/{layer}/{name} includes {inc} of lib/{where[inc]}/, a layer above it")
            elif rank[where[inc]] == rank[layer] and where[inc] != layer:
                bad.append(f"lib/{layer}/{name} includes {inc} of lib/{where[inc]}/, a layer beside it")
    # Circles among the headers (nothing includes a source file).
    graph = {n: set(i for i in incs if i != n) for n, incs in edges.items()}
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                bad.append("circle: " + " -> ".join(stack[stack.index(v):] + [v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            visit(u)
    for b in bad:
        print(b)
    print(f"{len(where)} files in {len(order)} layers; {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
