#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked.

1. A file in src/<area>/ may include headers of its own area and of the areas listed below it in
   the Layout block of that page, never of one above. (An area above can only be reached through
   such an include, so checking each include is checking the whole closure.)
2. Areas the page seals off from another ("Sealed: src/<area>/ never reaches a/, b/, ..."): no file
   of that area may have a header of those areas anywhere in its include closure: the headers it
   includes, the headers those include, and so on. The first chain that reaches one is printed.

The order and the seals are read from the page itself, so the page and the check cannot disagree.
(Backends, kernels and examples cannot reach src/ at all: their targets do not have it on the
include path.)

Usage: scripts/check_layers.py [ROOT]   (exit status 1 and one line per violation)
"""
import collections
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
AREA_LINE = re.compile(r"^src/([a-z_]+)[/|]")
SEALED_LINE = re.compile(r"^Sealed: src/([a-z_]+)/ never reaches ((?:[a-z_]+/(?:, |$))+)")
SOURCES = (".h", ".cc", ".cu", ".cuh")


def read_page(root):
    with open(os.path.join(root, "docs", "architecture.md")) as f:
        return f.read()


def layer_order(text):
    """Areas from top to bottom, as the Layout block lists them."""
    start = text.index("Folders depend one way, top to bottom:")
    block = text[start:].split("```")[1]
    order = []
    for line in block.splitlines():
        m = AREA_LINE.match(line)
        if m and m.group(1) not in order:
            order.append(m.group(1))
    return order


def seals(text):
    """{area: [areas its files must not reach]} from the page's "Sealed:" lines."""
    out = {}
    for line in text.splitlines():
        m = SEALED_LINE.match(line.strip())
        if m:
            out[m.group(1)] = [a.rstrip("/") for a in m.group(2).split(", ") if a]
    return out


def source_files(root):
    src = os.path.join(root, "src")
    for folder, _, files in os.walk(src):
        for name in sorted(files):
            if name.endswith(SOURCES):
                yield os.path.relpath(os.path.join(folder, name), root)


def includes(root, rel):
    """(line number, include text, resolved path or None) of each quoted include of 'rel'."""
    out = []
    with open(os.path.join(root, rel), errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            resolved = None
            for base in ("src", "include", os.path.dirname(rel)):
                candidate = os.path.normpath(os.path.join(base, target))
                if os.path.isfile(os.path.join(root, candidate)):
                    resolved = candidate
                    break
            out.append((number, target, resolved))  # None: generated code, a missing file
    return out


def area_of(rel):
    parts = rel.split(os.sep)
    return parts[1] if len(parts) > 2 and parts[0] == "src" else None


def violations(root):
    text = read_page(root)
    order = layer_order(text)
    sealed = seals(text)
    rank = {area: i for i, area in enumerate(order)}
    found = []
    src = os.path.join(root, "src")
    for area in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, area)) and area not in rank:
            found.append(f"src/{area}/: an area docs/architecture.md's Layout does not list")
    graph = {}
    for rel in source_files(root):
        area = area_of(rel)
        graph[rel] = includes(root, rel)
        if area not in rank:
            continue
        for number, target, _ in graph[rel]:
            target_area = target.split("/")[0] if "/" in target else None
            if target_area in rank and rank[target_area] < rank[area]:
                found.append(f"{rel}:{number}: src/{area}/ includes {target_area}/, which is "
                             "above it in docs/architecture.md's layer order")

    def edges(rel):
        if rel not in graph:
            graph[rel] = includes(root, rel) if rel.endswith(SOURCES) else []
        return [r for _, _, r in graph[rel] if r is not None]

    for area, forbidden in sorted(sealed.items()):
        for rel in sorted(r for r in list(graph) if area_of(r) == area):
            # Breadth first, so that the chain printed is a shortest one.
            parent = {rel: None}
            queue = collections.deque([rel])
            hit = None
            while queue and hit is None:
                current = queue.popleft()
                for nxt in edges(current):
                    if nxt in parent:
                        continue
                    parent[nxt] = current
                    if area_of(nxt) in forbidden:
                        hit = nxt
                        break
                    queue.append(nxt)
            if hit is None:
                continue
            chain = []
            node = hit
            while node is not None:
                chain.append(node)
                node = parent[node]
            chain.reverse()
            found.append(f"{rel}: src/{area}/ is sealed from {area_of(hit)}/ but reaches it: "
                         + " -> ".join(chain))
    return order, sealed, found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    order, sealed, found = violations(root)
    for line in found:
        print(line)
    if found:
        return 1
    described = "; ".join(f"src/{a}/ reaches none of {', '.join(f)}" for a, f in sealed.items())
    print("layers: no upward include (" + " > ".join(order) + ")" +
          (f"; {described} through any header" if described else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
