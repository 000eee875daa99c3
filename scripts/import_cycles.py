#!/usr/bin/env python3
"""Import cycles between the source files of each crate.

Usage: python3 scripts/import_cycles.py [WORKSPACE_ROOT]

Per crate (every directory with a Cargo.toml and a src/), builds a graph of which source file
uses items of which other file, and reports its strongly connected components: files that import
each other in a circle. docs/architecture.md ("Layering of files") says why none should.

What counts as a use of another file: a `crate::…`, `super::…` or `self::…` path (resolved to
the longest prefix that is a file), and each name of a `use crate::{…}` / `use super::{…}`
list. Comments and everything from the first `#[cfg(test)] mod … {` on are left out. It is a
text scan, not name resolution: a bare `use child::Item` (no `crate`/`super`/`self`), a glob
(`use super::*`), a name re-exported by lib.rs (`crate::Thread` counts as lib.rs) and methods
of a split `impl` (a parent calling a method that a child file defines) are not seen.

Exits 1 when it finds a cycle that ALLOWED does not list, 0 otherwise. An ALLOWED entry that no
longer matches a cycle is reported (without failing) so that it gets removed.
"""

import os
import re
import sys

# Cycles allowed for now, each as the set of its files (relative to the workspace root), with
# the reason. Remove an entry when its cycle is gone.
ALLOWED = []

TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*mod \w+\s*\{")
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
USE_LIST = re.compile(r"use (crate|super)::\{([^}]*)\}")


def crates(root):
    """The crate directories under `root` (and `root` itself when it has a src/)."""
    found = [
        d
        for d in sorted(os.listdir(root))
        if os.path.isfile(os.path.join(root, d, "Cargo.toml"))
        and os.path.isdir(os.path.join(root, d, "src"))
    ]
    if os.path.isdir(os.path.join(root, "src")):
        found.append(".")
    return found


def module_file(src, parts):
    """The file of the longest prefix of module path `parts` that is one (the crate root for none)."""
    for n in range(len(parts), 0, -1):
        base = os.path.join(src, *parts[:n])
        for candidate in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.isfile(candidate):
                return candidate
    for candidate in (os.path.join(src, "lib.rs"), os.path.join(src, "main.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None


def module_path(src, path):
    """The module path of file `path` (`a/b/mod.rs` and `a/b.rs` are both `a::b`)."""
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def strip(text):
    """`text` without comments and without the tests module and what follows it."""
    text = re.sub(r"//[^\n]*", "", text)
    return TEST_MOD.split(text)[0]


def imports(src, path):
    """The other files of the crate that file `path` uses items of."""
    with open(path, encoding="utf-8") as f:
        text = strip(f.read())
    me = module_path(src, path)
    parent = me[:-1]
    targets = set()

    def add(parts):
        target = module_file(src, parts)
        if target and target != path:
            targets.add(target)

    for m in PATH.finditer(text):
        keyword, rest = m.group(1), [p for p in m.group(2).split("::") if p]
        base = {"crate": [], "super": parent, "self": me}[keyword]
        add(base + rest)
    for m in USE_LIST.finditer(text):
        base = [] if m.group(1) == "crate" else parent
        for item in m.group(2).split(","):
            name = item.strip().split("::")[0].split(" ")[0]
            if name and name != "self":
                add(base + [name])
    return targets


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."

    def rel(path):
        return os.path.relpath(path, root)

    unexpected, allowed_seen = 0, set()
    for crate in crates(root):
        src = os.path.join(root, crate, "src")
        files = [
            os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs")
        ]
        edges = {f: imports(src, f) for f in files}
        for component in cycles(edges):
            names = {rel(f) for f in component}
            reason = None
            for i, (files_allowed, why) in enumerate(ALLOWED):
                if files_allowed == names:
                    reason = why
                    allowed_seen.add(i)
            label = f"allowed ({reason})" if reason else "NOT ALLOWED"
            print(f"{crate}: cycle among {len(component)} files, {label}:")
            for f in component:
                print(f"    {rel(f)} -> {sorted(rel(t) for t in edges[f] if t in component)}")
            if reason is None:
                unexpected += 1
    stale = [a for i, (a, _) in enumerate(ALLOWED) if i not in allowed_seen]
    for a in stale:
        print(f"allowed cycle no longer found (remove it from ALLOWED): {sorted(a)}")
    print(f"{unexpected} cycle(s) not allowed, {len(allowed_seen)} allowed")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
