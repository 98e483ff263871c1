#!/usr/bin/env python3
"""Import cycles among a Rust crate's modules.

usage: scripts/modcycles.py SRC_DIR      (e.g. transport/src): exit 1 and print each
       cycle if the modules' imports form one, exit 0 if they form none.
       scripts/modcycles.py --self-test: shows that a planted cycle is found.

An edge A -> B is a path `crate::...`, `super::...` or `self::...` in A's code (a `use`
or a path in an expression) that names module B or an item of B, B resolved as the
longest prefix of the path that is a module of the crate. Not counted: test code
(`#[cfg(test)] mod x { ... }` at the end of a file, and files declared as
`#[cfg(test)] mod x;`), comments, and a submodule's paths to its own ancestors (a
submodule is part of its parent: `node::recv` naming `super::Node` is inside `node`).
A parent naming its child's items, and siblings naming each other, count.
"""
import os
import re
import sys
import tempfile


def modules(root):
    mods, testonly = {}, set()
    for d, _, fs in os.walk(root):
        for f in fs:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            mods[tuple(rel)] = p
            for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+(\w+)\s*;", open(p).read()):
                testonly.add(tuple(rel) + (m.group(1),))
    return mods, testonly


def code(path):
    s = open(path).read()
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    s = re.sub(r"//[^\n]*", "", s)
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", s)
    return s[: m.start()] if m else s


def edges_of(root):
    mods, testonly = modules(root)

    def resolve(path):
        for k in range(len(path), 0, -1):
            if tuple(path[:k]) in mods:
                return tuple(path[:k])
        return None

    edges = {}
    for me, p in mods.items():
        if not me or any(me[: k + 1] in testonly for k in range(len(me))):
            continue
        for m in re.finditer(r"\b(crate|super|self)((?:::\w+)*)(::\{([^;]*?)\})?", code(p)):
            base = {"crate": [], "super": list(me[:-1]), "self": list(me)}[m.group(1)]
            parts = base
            for x in (x for x in m.group(2).split("::") if x):
                parts = parts[:-1] if x == "super" else parts + [x]
            tails = [[]]
            if m.group(4):
                tails = [
                    [t.strip().split("::")[0].split(" as ")[0].strip()]
                    for t in m.group(4).split(",")
                    if t.strip()
                ]
            for t in tails:
                r = resolve(parts + [x for x in t if x and x != "self"])
                if r and r != me and me[: len(r)] != r and r not in testonly:
                    edges.setdefault(me, set()).add(r)
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], 0
    for v0 in list(edges):
        if v0 in index:
            continue
        work = [(v0, iter(sorted(edges.get(v0, ()))))]
        index[v0] = low[v0] = n
        n += 1
        stack.append(v0)
        on.add(v0)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def report(root):
    edges = edges_of(root)
    found = cycles(edges)
    name = lambda m: "::".join(m)
    for comp in found:
        print("cycle:", ", ".join(name(m) for m in comp))
        for m in comp:
            inside = sorted(name(x) for x in edges.get(m, ()) if x in comp)
            print(f"    {name(m)} -> {', '.join(inside)}")
    count = sum(len(v) for v in edges.values())
    print(f"{root}: {len(edges)} modules with imports, {count} edges, {len(found)} cycles")
    return 1 if found else 0


def self_test():
    files = {
        "lib.rs": "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod t;\n",
        "a.rs": "use crate::b::B; // crate::c in a comment\n",
        "b.rs": 'pub struct B;\nfn f() { let _ = "crate::a"; }\n#[cfg(test)]\nmod tests { use crate::a; }\n',
        "c/mod.rs": "mod d;\nuse self::d::D;\n",
        "c/d.rs": "pub struct D;\nuse super::super::a;\n",
        "t.rs": "use crate::a;\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for f, s in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
            open(os.path.join(d, f), "w").write(s)
        assert cycles(edges_of(d)) == [], "comments, strings and test code count as no edge"
        open(os.path.join(d, "b.rs"), "w").write("use crate::c::d::D;\n" + files["b.rs"])
        got = cycles(edges_of(d))
        assert got == [[("a",), ("b",), ("c", "d")]], got
    print("modcycles self-test: a planted cycle a -> b -> c::d -> a is found; none without it")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(report(sys.argv[1]))
