"""Module structure of the loader (issue 16): no two module folders import each other, so each
has a direction (the agent wraps the recorder, the sources know nothing of the recorder, the
catalog of tables knows every source, the analysis knows the catalog). Within one folder a
submodule may use its parent's types, as Rust's own module pattern does."""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scaletrace", "src")


def rust_modules(root):
    """Module path (`record::sinks`; the crate root is "") -> its file."""
    modules = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".rs"):
                parts = os.path.relpath(os.path.join(folder, name), root)[:-3].split(os.sep)
                if parts[-1] in ("mod", "main", "lib"):
                    parts = parts[:-1]
                modules["::".join(parts)] = os.path.join(folder, name)
    return modules


def use_paths(prefix, tree):
    """The paths of one `use` tree, `{...}` groups expanded: `a::{b, c::d}` -> a::b, a::c::d."""
    tree = tree.strip()
    if tree.startswith("{"):
        paths, depth, item = [], 0, ""
        for ch in tree[1:-1] + ",":
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                if item.strip():
                    paths += use_paths(prefix, item)
                item = ""
            else:
                item += ch
        return paths
    if "::{" in tree:
        head, rest = tree.split("::{", 1)
        return use_paths(prefix + head.split("::"), "{" + rest)
    return [prefix + [p for p in re.split(r"::|\s+as\s+", tree) if p and p not in ("self", "*")]]


def without_test_modules(text):
    """`text` without its `#[cfg(test)] mod NAME { ... }` blocks (braces matched). Any other
    item marked `#[cfg(test)]` stays: counted, it can only add an edge, never hide one."""
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < at:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[at:m.start()])
        at = i
    out.append(text[at:])
    return "".join(out)


def import_graph(root):
    """Module path -> the modules its code names (`use` trees and `crate::`/`super::` paths,
    and its own submodules by name), test modules left out."""
    modules = rust_modules(root)

    def resolve(parts):
        for i in range(len(parts), 0, -1):
            if "::".join(parts[:i]) in modules:
                return "::".join(parts[:i])
        return None

    edges = {m: set() for m in modules}
    for module, path in modules.items():
        text = without_test_modules(open(path).read())
        text = re.sub(r"//.*", "", text)
        here = module.split("::") if module else []
        bases = {"crate": [], "super": here[:-1], "self": here}
        named = []
        for m in re.finditer(r"\buse\s+(crate|super|self)::([^;]*);", text):
            named += use_paths(bases[m.group(1)], m.group(2))
        for m in re.finditer(r"\b(crate|super)::((?:\w+::)*\w+)", text):
            named.append(bases[m.group(1)] + m.group(2).split("::"))
        for child in modules:
            parent = child.rsplit("::", 1)[0] if "::" in child else ""
            if child and parent == module and re.search(r"(?<![\w:])" + child.split("::")[-1] + r"::", text):
                named.append(child.split("::"))
        for parts in named:
            target = resolve(parts)
            if target not in (None, "", module):
                edges[module].add(target)
    return edges


def group(module):
    """The folder a module belongs to: `sources::<name>` for a source, else its first segment."""
    parts = module.split("::")
    return "::".join(parts[:2]) if parts[0] == "sources" and len(parts) > 1 else parts[0]


def folder_cycles(edges):
    """Groups of folders that import each other, each with the imports that close the cycle."""
    graph = {}
    why = {}
    for a, targets in edges.items():
        for b in targets:
            ga, gb = group(a), group(b)
            if ga != gb:
                graph.setdefault(ga, set()).add(gb)
                why.setdefault((ga, gb), []).append(f"{a} -> {b}")
    reach = {}
    for g in graph:
        seen, todo = set(), [g]
        while todo:
            for n in graph.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        reach[g] = seen
    cycles = set()
    for g in graph:
        if g in reach[g]:
            cycles.add(frozenset(h for h in reach[g] if g in reach.get(h, ())) | {g})
    return [(sorted(c), sorted(w for (a, b), ws in why.items() if a in c and b in c for w in ws))
            for c in cycles]


def test_no_two_module_folders_import_each_other():
    edges = import_graph(SRC)
    assert "record" in edges and "sources::tcp::attach" in edges and "agent::service" in edges
    assert "record" in {group(t) for t in edges["agent"]}, "the graph misses the agent's use of record"
    assert folder_cycles(edges) == []


def test_only_test_modules_are_left_out():
    text = "use crate::a;\n#[cfg(test)]\nfn helper() { crate::b::x(); }\n#[cfg(test)]\nmod tests {\n    fn f() { if true { crate::c::y(); } }\n}\nfn g() { crate::d::z(); }\n"
    kept = without_test_modules(text)
    assert "crate::a" in kept and "crate::b" in kept and "crate::d" in kept and "crate::c" not in kept


def test_the_check_sees_a_cycle():
    edges = {"probe": {"sources::tcp::attach"}, "sources::tcp::attach": {"hooks", "probe"},
             "record::sinks": {"record"}, "record": {"record::sinks"}, "hooks": set()}
    assert folder_cycles(edges) == [(["probe", "sources::tcp"],
                                     ["probe -> sources::tcp::attach", "sources::tcp::attach -> probe"])]


if __name__ == "__main__":
    print(folder_cycles(import_graph(sys.argv[1] if len(sys.argv) > 1 else SRC)))
