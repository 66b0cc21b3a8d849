#!/usr/bin/env python3
"""Checks that modules use each other one way.

The library (src/ less src/bin/): each module uses only modules of its own layer or of layers
below it (LAYERS, bottom first), no modules use each other in a cycle, every module has a
layer, and every name in LAYERS is a module (so a stale entry cannot linger).

The same one level up, folder by folder (a top-level folder or file of src/; FOLDERS, bottom
first): no folders use each other in a cycle, and at most MAX_UPWARD imports run from a folder
up to one above it in FOLDERS (each is listed).

Each binary with modules of its own (src/bin/NAME/main.rs): no modules use each other in a
cycle. There `crate::x` is that binary's module x; the library (`redis_blpop_lock::...`) is
another crate and may be used from anywhere.

An import is any path a file names (`crate::...`, with `{...}` groups expanded; `super::...`;
a child module's `name::...`), outside comments and the `#[cfg(test)] mod tests` that ends a
file; files named tests.rs are left out (tests may use anything). A name the crate root
re-exports (`pub use module::Name;`) stands for its module. Using the crate root, and a child
using its parent, is how modules nest: neither counts.

Usage: python3 .ci/layers.py [SRC]   (SRC defaults to src)
"""
import os, re, sys

# The library's modules by layer, bottom first; a directory's modules are in its layer unless
# one of them is named on its own (`config/builder`). `lib` is the crate root.
LAYERS = [
    ("base", ["error", "observe", "config", "cancel", "protocol", "model"]),
    ("transport", ["transport"]),
    ("driver", ["driver"]),
    ("handles", ["lib", "backend", "handle", "inspect", "aio"]),
]

# The top-level folders and files of the library, bottom first, finer than LAYERS: a folder
# should use only those before it.
FOLDERS = ["error", "cancel", "observe", "config", "protocol", "model", "transport", "driver",
           "backend", "handle", "inspect", "aio", "lib"]
MAX_UPWARD = 5


def modules_in(folder, skip=None):
    """Each module of the crate in `folder` ("driver/acquire"; the root is "lib" or "main")
    -> its file, leaving out the folder `skip`."""
    modules = {}
    for dirpath, dirs, files in os.walk(folder):
        rel_dir = os.path.relpath(dirpath, folder)
        if rel_dir == skip:
            dirs[:] = []
            continue
        for f in files:
            if f.endswith(".rs") and f != "tests.rs":
                rel = os.path.normpath(os.path.join(rel_dir, f[:-3])).replace(os.sep, "/")
                modules[rel.removesuffix("/mod")] = os.path.join(dirpath, f)
    return modules


def code(path):
    """The file's code: no comments, nothing from its `#[cfg(test)] mod tests` on."""
    text = open(path).read().split("#[cfg(test)]\nmod tests")[0]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def tree_at(text, i):
    """The use tree that starts at text[i]: `a::b`, `a::{b, c::{d}}`."""
    j = re.compile(r"[\w:]*").match(text, i).end()
    if text[j:j + 1] == "{":
        depth = 0
        for j in range(j, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i:j + 1]
    return text[i:j]


def expand(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    if "{" not in tree:
        return [tree.strip()]
    start = tree.index("{")
    prefix, inner, parts, depth, last = tree[:start], tree[start + 1:tree.rindex("}")], [], 0, 0
    for k, c in enumerate(inner + ","):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(inner[last:k])
            last = k + 1
    return [prefix + p for part in parts if part.strip() for p in expand(part.strip())]


def macros(text):
    """The `macro_rules!` definitions in `text`: name -> body, and the text without them."""
    found, rest, i = {}, [], 0
    for m in re.finditer(r"macro_rules!\s*(\w+)\s*\{", text):
        if m.start() < i:
            continue
        depth, j, quoted = 0, m.end() - 1, False
        for j in range(m.end() - 1, len(text)):
            # Braces in string literals (a doc line's text) are not the macro's.
            if text[j] == '"' and text[j - 1] != "\\":
                quoted = not quoted
            if not quoted:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    break
        found[m.group(1)] = text[m.end():j]
        rest.append(text[i:m.start()])
        i = j + 1
    return found, "".join(rest) + text[i:]


def invoked(text, names):
    """The macros of `names` that `text` invokes: `name!(..)`, or named as an invocation's
    first argument (`for_api!(name, ..)`, which expands `name!`)."""
    called = set(re.findall(r"(\w+)\s*!", text))
    called |= set(re.findall(r"!\s*[(\[{]\s*(?:\w+::)*(\w+)\s*[,;]", text))
    return called & names


def imports(modules, root):
    """Each module -> the modules it uses (the root among them). A macro's `$crate::` paths
    are resolved where it is expanded, so they are the imports of the modules that invoke it,
    not of the module that defines it."""
    def resolve(parts, root_names):
        """The deepest module a path names, from the crate root."""
        best = None
        for i in range(1, len(parts) + 1):
            if "/".join(parts[:i]) in modules:
                best = "/".join(parts[:i])
        if best is None and parts:
            best = root_names.get(parts[0])
        return best

    root_names = {}
    for m in re.finditer(r"\bpub use ([^;]+);", code(modules[root])):
        for path in expand(m.group(1)):
            path, _, alias = path.partition(" as ")
            source = resolve(path.strip().split("::")[:-1], {})
            if source:
                root_names[(alias or path).strip().split("::")[-1]] = source

    def paths(text):
        found = set()
        for m in re.finditer(r"(?<![\w:])crate::", text):
            found |= {resolve(p.split("::"), root_names) for p in expand(tree_at(text, m.end()))}
        return found

    bodies, texts = {}, {}
    for mod, path in modules.items():
        defined, texts[mod] = macros(code(path))
        bodies.update(defined)
    # What each macro's expansion uses: its own paths and those of the macros it expands.
    uses = {name: paths(body) for name, body in bodies.items()}
    calls = {name: invoked(body, set(bodies)) - {name} for name, body in bodies.items()}
    changed = True
    while changed:
        changed = False
        for name in bodies:
            more = set().union(*(uses[c] for c in calls[name])) if calls[name] else set()
            if not more <= uses[name]:
                uses[name] |= more
                changed = True

    edges = {m: set() for m in modules}
    for mod, path in modules.items():
        here = [] if mod == root else mod.split("/")
        children = {m.split("/")[-1] for m in modules if m.rpartition("/")[0] == mod}
        text = texts[mod]
        found = set()
        for name in invoked(text, set(bodies)):
            found |= uses[name]
        found |= paths(text)
        for m in re.finditer(r"(?<![\w:])((?:super::)+)", text):
            base = here[: len(here) - m.group(1).count("super::")]
            for p in expand(tree_at(text, m.end())):
                parts = base + [s for s in p.split("::") if s]
                found.add(resolve(parts, root_names) or "/".join(base) or root)
        for child in children:
            if re.search(rf"(?<![\w:]){child}::", text):
                found.add(mod + "/" + child)
        edges[mod] = {t for t in found if t in modules and t != mod}
    return edges


def cycles(edges, root):
    """Groups of modules that use each other in a cycle (Tarjan's strongly connected
    components)."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            # Everything uses the root, and a child its parent: how modules nest, not a cycle.
            if w == root or v.startswith(w + "/"):
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return groups


src = sys.argv[1] if len(sys.argv) > 1 else "src"
problems = []

# The library: layers, then cycles.
lib = modules_in(src, skip="bin")
edges = imports(lib, "lib")
tops = {m.split("/")[0] for m in lib}
for name, names in LAYERS:
    problems += [f"stale: layer {name} lists {t}, which is no module of {src}/"
                 for t in names if t not in lib]
named = {t: i for i, (_, names) in enumerate(LAYERS) for t in names}
problems += [f"no layer: module {t} (add it to LAYERS)" for t in sorted(tops - set(named))]


def layer_of(mod):
    """The layer of the longest name in LAYERS that `mod` is or is inside."""
    parts = mod.split("/")
    for i in range(len(parts), 0, -1):
        if "/".join(parts[:i]) in named:
            return named["/".join(parts[:i])]
    return None


for m in sorted(edges):
    for t in sorted(edges[m] - {"lib"}):
        a, b = layer_of(m), layer_of(t)
        if a is not None and b is not None and b > a:
            problems.append(f"upward: {m} ({LAYERS[a][0]}) uses {t} ({LAYERS[b][0]})")
problems += ["cycle: " + " <-> ".join(group) for group in cycles(edges, "lib")]
summary = [f"library: {len(lib)} modules, {sum(map(len, edges.values()))} imports"]

# Folder by folder: cycles, and imports that run up FOLDERS.
problems += [f"stale: FOLDERS lists {f}, which is no module of {src}/"
             for f in FOLDERS if f not in tops]
problems += [f"no place: {t} (add it to FOLDERS)" for t in sorted(tops - set(FOLDERS))]
rank = {f: i for i, f in enumerate(FOLDERS)}
folder_edges, upward = {t: set() for t in tops}, []
for m in sorted(edges):
    for t in sorted(edges[m] - {"lib"}):
        a, b = m.split("/")[0], t.split("/")[0]
        if a != b:
            folder_edges[a].add(b)
            if rank.get(b, 0) > rank.get(a, 0):
                upward.append(f"{m} uses {t}")
problems += ["folder cycle: " + " <-> ".join(g) for g in cycles(folder_edges, "lib")]
if len(upward) > MAX_UPWARD:
    problems.append(f"{len(upward)} imports run up FOLDERS, more than {MAX_UPWARD}")
summary += [f"upward: {u}" for u in upward]
summary.append(f"folders: {len(tops)}, {len(upward)} imports up (at most {MAX_UPWARD})")

# Each binary with modules of its own: cycles.
bins = os.path.join(src, "bin")
for name in sorted(os.listdir(bins)) if os.path.isdir(bins) else []:
    if os.path.isfile(os.path.join(bins, name, "main.rs")):
        modules = modules_in(os.path.join(bins, name))
        edges = imports(modules, "main")
        problems += [f"cycle in bin {name}: " + " <-> ".join(g) for g in cycles(edges, "main")]
        summary.append(f"bin {name}: {len(modules)} modules, "
                       f"{sum(map(len, edges.values()))} imports")

print("\n".join(problems + summary + [f"{len(problems)} problems"]))
sys.exit(1 if problems else 0)
