#!/usr/bin/env python3
"""The crate's import structure, read from the code: which module uses which.

Reads every file reachable from src/lib.rs through `mod` declarations, and in each the paths it names:
`use` trees and `crate::`/`super::`/`self::` paths, paths through a name a `use` bound to a module, and paths
through a child module. A path is attributed to the longest module prefix that is a file; comments, string
literals and test code (`#[cfg(test)]` items, and modules compiled only for tests or the `testkit` feature)
are left out unless --with-tests is given.

Prints:
  - the graph between top-level modules (a folder or a file directly under src/), with how many paths each
    edge carries;
  - every circle (strongly connected component of more than one node) between top-level modules, and every
    circle between files inside one folder;
  - the floors: the longest chain of the condensed top-level graph and of the condensed file graph (a
    module with no dependency inside the crate is on floor 1);
  - the upward imports: the edges that close a circle (a greedy minimum set of them, with file:line), the
    imports a layered design would not have.

--check exits 1 when there is any circle between top-level modules or between files inside a folder.
--files prints the file graph's edges too. Python 3 standard library only.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
TEST_CFG = re.compile(r"#\[cfg\((?:[^\[\]]*\b(?:test|testkit)\b[^\[\]]*)\)\]")


# ---------------------------------------------------------------------------------------------------------
# Lexing: comments and literals out, line numbers kept.


def strip_code(text):
    """The text with comments, string and char literals blanked (newlines kept, so offsets keep lines)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and not is_ident_char(text, i - 1):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(blank(text[i:j]))
            i = j
        elif c == "b" and nxt in "\"'" and not is_ident_char(text, i - 1):
            out.append(" ")
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime or label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def blank(s):
    return re.sub(r"[^\n]", " ", s)


def is_ident_char(text, i):
    return i >= 0 and (text[i].isalnum() or text[i] == "_")


def item_end(code, start):
    """Where the item starting at `start` ends: after its `;` at depth 0 or its first block's `}`."""
    depth, i, n = 0, start, len(code)
    while i < n:
        c = code[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth == 0:
            return i + 1
        elif c == "{" and depth == 0:
            level = 0
            while i < n:
                if code[i] == "{":
                    level += 1
                elif code[i] == "}":
                    level -= 1
                    if level == 0:
                        return i + 1
                i += 1
            return n
        i += 1
    return n


def drop_test_items(code):
    """The code with every item under a test-only `#[cfg(...)]` blanked."""
    while True:
        m = TEST_CFG.search(code)
        if not m:
            return code
        end = item_end(code, m.end())
        code = code[: m.start()] + blank(code[m.start() : end]) + code[end:]


# ---------------------------------------------------------------------------------------------------------
# The module tree.


class Module:
    def __init__(self, path, file, test_only):
        self.path = path  # tuple of segments after `crate`
        self.file = file
        self.test_only = test_only
        self.children = {}  # name -> child module path (files only)


MOD_DECL = re.compile(
    r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;"
)


def load_tree(src):
    """Every file module reachable from lib.rs: {path tuple: Module}."""
    modules = {}

    def visit(path, file, test_only):
        mod = Module(path, file, test_only)
        modules[path] = mod
        text = open(file, encoding="utf-8").read()
        code = strip_code(text)
        directory = child_dir(path, file)
        for m in MOD_DECL.finditer(code):
            attrs, name = m.group(1), m.group(2)
            raw_attrs = text[m.start(1) : m.end(1)]
            explicit = re.search(r'#\[path\s*=\s*"([^"]+)"\]', raw_attrs)
            if explicit:
                child_file = os.path.join(os.path.dirname(file), explicit.group(1))
            else:
                child_file = os.path.join(directory, name + ".rs")
                if not os.path.exists(child_file):
                    child_file = os.path.join(directory, name, "mod.rs")
            if not os.path.exists(child_file):
                continue
            child_test = test_only or bool(TEST_CFG.search(attrs))
            mod.children[name] = path + (name,)
            visit(path + (name,), child_file, child_test)

    visit((), os.path.normpath(os.path.join(src, "lib.rs")), False)
    return modules


def child_dir(path, file):
    base = os.path.basename(file)
    if not path or base == "mod.rs":
        return os.path.dirname(file)
    return os.path.join(os.path.dirname(file), path[-1])


# ---------------------------------------------------------------------------------------------------------
# Paths named in a file.

USE_ITEM = re.compile(r"(?<![A-Za-z0-9_])use\s+([^;]*);")
PATH = re.compile(r"(?<![A-Za-z0-9_:])((?:" + IDENT + r")(?:\s*::\s*" + IDENT + r")+)")


def expand_use(tree):
    """`a::{b, c::{self, d as e}}` -> [(['a','b'], 'b'), (['a','c'], 'c'), (['a','c','d'], 'e')]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    results = []

    def parse(prefix, s):
        s = s.strip()
        if not s:
            return
        if s.startswith("::"):
            s = s[2:]
        brace = s.find("{")
        if brace >= 0 and (s.find(" as ") < 0 or s.find(" as ") > brace):
            head = [p.strip() for p in s[:brace].split("::") if p.strip()]
            body = s[brace + 1 : s.rfind("}")]
            for part in split_top(body):
                parse(prefix + head, part)
            return
        alias = None
        if " as " in s:
            s, alias = [x.strip() for x in s.split(" as ", 1)]
        segs = [p.strip() for p in s.split("::") if p.strip()]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        full = prefix + segs
        if not full:
            return
        if full[-1] == "*":
            results.append((full[:-1], None))
        else:
            results.append((full, alias or full[-1]))

    parse([], tree)
    return results


def split_top(body):
    parts, depth, cur = [], 0, []
    for c in body:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def absolute(mod, segs, modules, bound, inline=0):
    """The absolute path (tuple after `crate`) a path names from module `mod`, or None if outside; `inline`
    is how many inline `mod name { ... }` blocks of the file the path is in (their `super` stays in the file).
    """
    first = segs[0]
    if first == "crate":
        return tuple(segs[1:])
    if first in ("super", "self"):
        base = list(mod.path)
        rest = list(segs)
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super" and inline > 0:
                inline -= 1
            elif rest[0] == "super":
                if not base:
                    return None
                base.pop()
            rest.pop(0)
        return tuple(base + rest)
    if first in mod.children:
        return mod.path + tuple(segs)
    if first in bound:
        return bound[first] + tuple(segs[1:])
    return None


def owner(path, modules, imports=None, seen=0):
    """The file module defining `path`: its longest prefix that is a file module, or, when the next
    segment is a name that module imports (a re-export, or an import a child reaches through `super::`),
    the module that name comes from."""
    for k in range(len(path), -1, -1):
        if path[:k] in modules:
            rest = path[k:]
            bound = (imports or {}).get(path[:k], {})
            if rest and rest[0] in bound and seen < 16:
                return owner(bound[rest[0]] + rest[1:], modules, imports, seen + 1)
            return path[:k]
    return None


INLINE_MOD = re.compile(r"\bmod\s+" + IDENT + r"\s*\{")


def inline_depth(code):
    """A function giving how many inline `mod name { ... }` blocks enclose an offset of `code`."""
    spans = []
    for m in INLINE_MOD.finditer(code):
        depth, j = 0, m.end() - 1
        while j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            if depth == 0:
                break
            j += 1
        spans.append((m.end(), j))
    return lambda offset: sum(1 for a, b in spans if a <= offset < b)


def references(mod, modules, with_tests):
    """([(absolute path, line)] for every path the file names into the crate, {name: absolute path} of the
    names its `use` items bind)."""
    text = open(mod.file, encoding="utf-8").read()
    code = strip_code(text)
    if not with_tests:
        code = drop_test_items(code)
    code = MOD_DECL.sub(lambda m: blank(m.group(0)), code)
    line_of = line_index(code)
    inline_at = inline_depth(code)
    refs, bound, imports = [], {}, {}
    for m in USE_ITEM.finditer(code):
        for segs, alias in expand_use(m.group(1)):
            target = absolute(mod, segs, modules, bound, inline_at(m.start()))
            if target is None:
                continue
            if alias is None or target not in modules:  # naming a module binds it; its uses count
                refs.append((target, line_of(m.start())))
            if alias and alias != "_":
                imports[alias] = target
                if target in modules:
                    bound[alias] = target
        code = code[: m.start()] + blank(m.group(0)) + code[m.end() :]
    for m in PATH.finditer(code):
        segs = [s.strip() for s in m.group(1).split("::")]
        target = absolute(mod, segs, modules, bound, inline_at(m.start()))
        if target is not None:
            refs.append((target, line_of(m.start())))
    return refs, imports


def line_index(code):
    starts = [0] + [i + 1 for i, c in enumerate(code) if c == "\n"]

    def line_of(offset):
        lo, hi = 0, len(starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid
        return lo + 1

    return line_of


# ---------------------------------------------------------------------------------------------------------
# Graphs.


def sccs(nodes, edges):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                comps.append(sorted(comp))
    return comps


def floors(nodes, edges):
    """{node: floor} on the condensed graph (1 = uses nothing), and the number of floors."""
    comps = sccs(nodes, edges)
    comp_of = {n: i for i, c in enumerate(comps) for n in c}
    memo = {}

    def floor(ci):
        if ci in memo:
            return memo[ci]
        memo[ci] = 1
        best = 1
        for n in comps[ci]:
            for t in edges.get(n, ()):
                if comp_of[t] != ci:
                    best = max(best, 1 + floor(comp_of[t]))
        memo[ci] = best
        return best

    sys.setrecursionlimit(10000)
    result = {n: floor(comp_of[n]) for n in nodes}
    return result, max(result.values(), default=0)


def longest_chain(nodes, edges, floor_of):
    """One longest chain, top first: from a node on the top floor, each step to a use one floor down."""
    if not nodes:
        return []
    node = max(sorted(nodes), key=lambda n: floor_of[n])
    chain = [node]
    while floor_of[node] > 1:
        below = [t for t in sorted(edges.get(node, ())) if floor_of[t] == floor_of[node] - 1]
        if not below:  # the step down is inside a circle: take a member that goes on
            below = [t for t in sorted(edges.get(node, ())) if floor_of[t] == floor_of[node] and t not in chain]
        if not below:
            break
        node = below[0]
        chain.append(node)
    return chain


def upward_edges(comp, edges, weight):
    """Edges inside one circle that a layering must drop: Eades-Lin-Smyth's greedy order, then the edges
    that point up it (a target ordered above its source)."""
    remaining = set(comp)
    left, right = [], []
    inside = lambda n, d: [t for t in d.get(n, ()) if t in remaining]
    incoming = defaultdict(set)
    for n in comp:
        for t in edges.get(n, ()):
            if t in comp:
                incoming[t].add(n)
    while remaining:
        changed = True
        while changed:
            changed = False
            for n in sorted(remaining):
                if not inside(n, edges):  # a sink: it goes to the bottom
                    right.insert(0, n)
                    remaining.discard(n)
                    changed = True
            for n in sorted(remaining):
                if not [s for s in incoming[n] if s in remaining]:  # a source: the top
                    left.append(n)
                    remaining.discard(n)
                    changed = True
        if remaining:
            score = lambda n: sum(weight[(n, t)] for t in inside(n, edges)) - sum(
                weight[(s, n)] for s in incoming[n] if s in remaining
            )
            pick = max(sorted(remaining), key=score)
            left.append(pick)
            remaining.discard(pick)
    order = {n: i for i, n in enumerate(left + right)}  # top first: a node uses those after it
    return sorted((s, t) for s in comp for t in edges.get(s, ()) if t in comp and order[t] < order[s])


# ---------------------------------------------------------------------------------------------------------
# Report.


def name(path):
    return "crate" if not path else "::".join(path)


def top(path):
    return path[0] if path else "crate"


def folder(mod):
    return os.path.dirname(mod.file)


def site(mod, line, root):
    """`src/x.rs:12`: relative to the crate's root (the folder above src/)."""
    return f"{os.path.relpath(os.path.abspath(mod.file), root)}:{line}"


def sites(found):
    """The distinct sites, at most six, in order."""
    distinct = sorted(set(found), key=lambda s: (s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])))
    return ", ".join(distinct[:6]) + (" ..." if len(distinct) > 6 else "")


def build(src, with_tests):
    modules = load_tree(src)
    root = os.path.dirname(os.path.abspath(src))
    kept = {p: m for p, m in modules.items() if with_tests or not m.test_only}
    file_edges, top_edges = defaultdict(set), defaultdict(set)
    file_weight, top_weight = defaultdict(int), defaultdict(int)
    where = defaultdict(list)  # (top source, top target) -> ["file:line"]
    file_where = defaultdict(list)
    read = {path: references(mod, modules, with_tests) for path, mod in kept.items()}
    imports = {path: names for path, (_, names) in read.items()}
    for path, mod in sorted(kept.items()):
        for full, line in read[path][0]:
            target = owner(full, modules, imports)
            if target is None or target == path or target not in kept or target == ():
                continue
            file_edges[path].add(target)
            file_weight[(path, target)] += 1
            file_where[(path, target)].append(site(mod, line, root))
            if path and top(path) != top(target):
                key = (top(path), top(target))
                top_edges[key[0]].add(key[1])
                top_weight[key] += 1
                where[key].append(site(mod, line, root))
    return kept, file_edges, file_weight, file_where, top_edges, top_weight, where


def circles(args):
    """One line per circle, for a test to read: `top: a, b` or `files: a::x, a::y`."""
    kept, file_edges, _, _, top_edges, _, _ = build(args.src, args.with_tests)
    tops = sorted({top(p) for p in kept if p})
    files = sorted(p for p in kept if p)
    for comp in sccs(tops, top_edges):
        if len(comp) > 1:
            print("top: " + ", ".join(comp))
    for comp in sccs(files, file_edges):
        if len(comp) > 1:
            print("files: " + ", ".join(name(p) for p in comp))
    return 0


def report(args):
    if args.circles:
        return circles(args)
    kept, file_edges, file_weight, file_where, top_edges, top_weight, where = build(args.src, args.with_tests)
    tops = sorted({top(p) for p in kept if p})
    files = sorted(p for p in kept if p)
    problems = 0
    print(f"{len(files)} files in {len(tops)} top-level modules" + (" (with test code)" if args.with_tests else ""))

    top_floor, top_floors = floors(tops, top_edges)
    print(f"\n## Top-level modules: {top_floors} floors")
    print("  longest chain: " + " -> ".join(longest_chain(tops, top_edges, top_floor)))
    for t in sorted(tops, key=lambda t: (top_floor[t], t)):
        deps = ", ".join(f"{d}({top_weight[(t, d)]})" for d in sorted(top_edges.get(t, ())))
        print(f"  floor {top_floor[t]:>2}  {t:<18} -> {deps}")

    top_circles = [c for c in sccs(tops, top_edges) if len(c) > 1]
    print(f"\n## Circles between top-level modules: {len(top_circles)}")
    for comp in top_circles:
        problems += 1
        print(f"  {{{', '.join(comp)}}}; upward imports:")
        for s, t in upward_edges(comp, top_edges, top_weight):
            print(f"    {s} -> {t} ({len(where[(s, t)])}): {sites(where[(s, t)])}")

    file_floor, file_floors = floors(files, file_edges)
    in_folder = []
    for comp in sccs(files, file_edges):
        by_dir = defaultdict(list)
        for p in comp:
            by_dir[folder(kept[p])].append(p)
        for d, members in sorted(by_dir.items()):
            if len(members) < 2:
                continue
            member_set = set(members)
            sub = {p: {t for t in file_edges.get(p, ()) if t in member_set} for p in members}
            in_folder += [c for c in sccs(members, sub) if len(c) > 1]
    print(f"\n## Circles between files inside one folder: {len(in_folder)}")
    for comp in in_folder:
        problems += 1
        members = set(comp)
        sub = {p: {t for t in file_edges.get(p, ()) if t in members} for p in comp}
        print(f"  {{{', '.join(name(p) for p in comp)}}}; upward imports:")
        for s, t in upward_edges(comp, sub, file_weight):
            print(f"    {name(s)} -> {name(t)} ({len(file_where[(s, t)])}): {sites(file_where[(s, t)])}")

    file_circles = [c for c in sccs(files, file_edges) if len(c) > 1]
    print(f"\n## Files: {file_floors} floors; {len(file_circles)} circles between files (any folders)")
    print("  longest chain: " + " -> ".join(name(p) for p in longest_chain(files, file_edges, file_floor)))
    for comp in file_circles:
        print(f"  {len(comp)} files: {', '.join(name(p) for p in comp[:12])}{' ...' if len(comp) > 12 else ''}")
    if args.files:
        print("\n## File graph")
        for p in sorted(files, key=lambda p: (file_floor[p], p)):
            deps = ", ".join(name(t) for t in sorted(file_edges.get(p, ())))
            print(f"  floor {file_floor[p]:>2}  {name(p)} -> {deps}")

    top_up = sum(len(upward_edges(c, top_edges, top_weight)) for c in top_circles)
    file_up = sum(len(upward_edges(c, file_edges, file_weight)) for c in file_circles)
    print(
        f"\nsummary: top-level modules: {top_floors} floors, {len(top_circles)} circles, {top_up} upward "
        f"imports; files: {file_floors} floors, {len(file_circles)} circles ({len(in_folder)} inside one "
        f"folder), {file_up} upward imports"
    )
    return 1 if args.check and problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    parser.add_argument("--check", action="store_true", help="exit 1 on any circle")
    parser.add_argument("--files", action="store_true", help="print the file graph too")
    parser.add_argument("--circles", action="store_true", help="only the circles, one a line (for tests)")
    parser.add_argument("--with-tests", action="store_true", help="count test code's imports too")
    sys.exit(report(parser.parse_args()))


if __name__ == "__main__":
    main()
