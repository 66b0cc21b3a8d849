#!/usr/bin/env python3
"""Checks the library's imports go one way: each module uses only modules of its own layer
or of layers to its left, and no modules use each other in a cycle. Reads every path a file
names (`crate::...`, `super::...`, a child module's `name::...`), code lines only."""
import os, re, sys

LAYERS = [
    ("base", ["error", "id", "observe", "settings", "cancel", "protocol"]),
    ("transport", ["transport", "timer"]),
    ("driver", ["driver", "renew", "queue"]),
    ("handles", ["lib", "backend", "builder", "lock", "guard", "cache", "inspect", "acquisition", "semaphore", "rwlock",
                 "quorum", "sentinel", "aio"]),
]
# What the crate root re-exports, by the module that defines it.
ROOT_NAMES = {"Error": "error", "CancelToken": "cancel", "Holder": "lock", "Lock": "lock",
              "LockBuilder": "builder", "Backend": "backend", "Cache": "cache",
              "LockGuard": "guard", "ArcLockGuard": "guard", "with_lock": "guard",
              "Quorum": "quorum", "Sentinel": "sentinel", "reset_all": "inspect/reset_all",
              "id": "id", "Semaphore": "semaphore", "SemaphorePermit": "semaphore", "ArcSemaphorePermit": "semaphore", "RwLock": "rwlock", "RwLockReadGuard": "rwlock", "RwLockWriteGuard": "rwlock"}

src = sys.argv[1] if len(sys.argv) > 1 else "src"
modules = {}
for root, dirs, files in os.walk(src):
    if os.path.relpath(root, src).startswith("bin"):
        continue
    for f in files:
        if f.endswith(".rs"):
            rel = os.path.relpath(os.path.join(root, f), src)[:-3]
            if rel.endswith("tests"):
                # Tests may use any layer.
                continue
            mod = rel[:-len("/mod")] if rel.endswith("/mod") else rel
            modules["lib" if mod == "lib" else mod] = os.path.join(root, f)

def resolve(parts):
    """The deepest module a path names."""
    best = None
    for i in range(1, len(parts) + 1):
        if "/".join(parts[:i]) in modules:
            best = "/".join(parts[:i])
    if best is None and parts and parts[0] in ROOT_NAMES:
        best = ROOT_NAMES[parts[0]]
    return best

def layer(mod):
    top = mod.split("/")[0]
    for i, (_, tops) in enumerate(LAYERS):
        if top in tops:
            return i
    raise SystemExit(f"module {mod} has no layer")

edges = {m: set() for m in modules}
for mod, path in modules.items():
    is_dir = path.endswith("mod.rs") or mod == "lib"
    here = mod.split("/") if mod != "lib" else []
    parent = here if is_dir else here[:-1]
    children = {m.split("/")[-1] for m in modules if m.startswith(mod + "/")} if mod != "lib" else set()
    text = open(path).read()
    text = text.split("#[cfg(test)]\nmod tests")[0]
    for line in text.splitlines():
        code = line.split("//")[0]
        for m in re.finditer(r"crate::(\{[^}]*\}|[\w:]+)", code):
            body = m.group(1)
            names = re.findall(r"\w+(?:::\w+)*", body)
            for n in names:
                t = resolve(n.split("::"))
                if t and t != mod:
                    edges[mod].add(t)
        for m in re.finditer(r"(?<![:\w])((?:super::)+)([\w:]*)", code):
            up = m.group(1).count("super::")
            base = parent[: len(parent) - (up - 1)]
            t = resolve(base + [p for p in m.group(2).split("::") if p]) or "/".join(base) or "lib"
            if t != mod and t in modules:
                edges[mod].add(t)
        for child in children:
            if re.search(rf"(?<![:\w]){child}::", code):
                edges[mod].add(mod + "/" + child)

bad = 0
for m in sorted(edges):
    for t in sorted(edges[m]):
        if t == "lib":
            continue
        if layer(t) > layer(m):
            print(f"upward: {m} ({LAYERS[layer(m)][0]}) uses {t} ({LAYERS[layer(t)][0]})")
            bad += 1

# Cycles: strongly connected components of more than one module (the crate root aside).
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
def strong(v):
    index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        # A child using its parent's items (what the parent declares for its children) is
        # how modules nest, not a cycle.
        if w == "lib" or v.startswith(w + "/"):
            continue
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        strong(v)
for comp in sccs:
    print("cycle: " + " <-> ".join(comp))
    bad += 1
print(f"{len(modules)} modules, {sum(len(e) for e in edges.values())} imports, {bad} problems")
sys.exit(1 if bad else 0)
