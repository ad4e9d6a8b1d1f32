#!/usr/bin/env python3
"""The source tree's structure, for a contributor (and the figures of a
redesign's note): the folders' layers and every #include that points up a
layer, the trainer's call graph between files and its largest circle (a
strongly connected component), the files that name "fsdp", and the largest
source files.

  python3 scripts/structure.py [BUILD_DIR]

BUILD_DIR (default build/) holds the objects of a build; the call graph is
read from their symbols with nm. Layers, lowest first; an include from a
folder to one of a higher layer points up:"""
import os, re, subprocess, sys

LAYERS = [["core"], ["comm", "data", "nn", "io"], ["models", "optim"], ["backends", "cuda"],
          ["config"], ["trainer", "gpu"], ["main.c"]]
LEVEL = {f: i for i, fs in enumerate(LAYERS) for f in fs}
top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = os.path.join(top, "src")


def part(path):  # "src/nn/gemm.c" -> "nn"
    rel = os.path.relpath(path, src).split(os.sep)
    return rel[0] if len(rel) > 1 else rel[0]


def sources():
    for d, _, fs in os.walk(src):
        for f in sorted(fs):
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                yield os.path.join(d, f)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(top, "build")
    files = list(sources())
    print("layers:", " < ".join("/".join(l) for l in LAYERS))
    up = []
    for f in files:
        for n, line in enumerate(open(f, errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if not m or m.group(1) not in LEVEL:
                continue
            a, b = part(f), m.group(1)
            if a in LEVEL and LEVEL[b] > LEVEL[a]:
                up.append(f"{os.path.relpath(f, top)}:{n}: {a} includes {b}/")
    print(f"includes pointing up a layer: {len(up)}")
    for u in up:
        print("  " + u)
    fsdp = [f for f in files if "fsdp" in open(f, errors="replace").read()]
    print(f'files that name "fsdp": {len(fsdp)} of {len(files)}')
    sizes = sorted(((sum(1 for _ in open(f, errors="replace")), f) for f in files), reverse=True)
    print("largest source files:", ", ".join(f"{os.path.relpath(f, top)} {n}" for n, f in sizes[:5]))
    # the trainer's call graph between its files, from the objects' symbols
    objs = {}
    for d in ("trainer", "gpu"):
        od = os.path.join(build, "src", d)
        if os.path.isdir(od):
            for o in sorted(os.listdir(od)):
                # objects whose source is gone (a build dir's leftovers) are not read
                if o.endswith(".o") and os.path.exists(os.path.join(src, d, o[:-2] + ".c")):
                    objs[f"{d}/{o[:-2]}.c"] = os.path.join(od, o)
    if not objs:
        print(f"no objects under {build}/src/trainer: build first for the call graph")
        return
    defs, uses = {}, {}
    for name, o in objs.items():
        out = subprocess.run(["nm", o], capture_output=True, text=True).stdout
        uses[name] = set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBR":
                defs[p[2]] = name
            elif len(p) == 2 and p[0] == "U":
                uses[name].add(p[1])
    graph = {a: {defs[s] for s in u if s in defs and defs[s] != a} for a, u in uses.items()}
    # Tarjan's strongly connected components
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            comps.append(sorted(c))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    big = max(comps, key=len)
    print(f"trainer files (trainer/, gpu/ built in {build}): {len(graph)}; the largest circle of "
          f"files that call each other: {len(big)}: {' '.join(big)}")


if __name__ == "__main__":
    main()
