#!/usr/bin/env python3
"""The layering rule of docs/architecture.md, checked: a file in src/<area>/ may include headers of
its own area and of the areas listed below it in the Layout block of that page, never of one above.
The order is read from the page itself, so the page and the check cannot disagree. (Backends,
kernels and examples cannot reach src/ at all: their targets do not have it on the include path.)

Usage: scripts/check_layers.py [ROOT]   (exit status 1 and one line per upward include)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
AREA_LINE = re.compile(r"^src/([a-z_]+)[/|]")


def layer_order(root):
    """Areas from top to bottom, as the Layout block of docs/architecture.md lists them."""
    with open(os.path.join(root, "docs", "architecture.md")) as f:
        text = f.read()
    start = text.index("Folders depend one way, top to bottom:")
    block = text[start:].split("```")[1]
    order = []
    for line in block.splitlines():
        m = AREA_LINE.match(line)
        if m and m.group(1) not in order:
            order.append(m.group(1))
    return order


def violations(root):
    order = layer_order(root)
    rank = {area: i for i, area in enumerate(order)}
    found = []
    src = os.path.join(root, "src")
    for area in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, area)):
            continue
        if area not in rank:
            found.append(f"src/{area}/: an area docs/architecture.md's Layout does not list")
            continue
        for folder, _, files in os.walk(os.path.join(src, area)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(folder, name)
                with open(path, errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) not in rank:
                            continue  # a system header, the public SDK (nereid/), generated code
                        target = m.group(1)
                        if rank[target] < rank[area]:
                            rel = os.path.relpath(path, root)
                            found.append(f"{rel}:{number}: src/{area}/ includes {target}/, which "
                                         f"is above it in docs/architecture.md's layer order")
    return order, found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    order, found = violations(root)
    for line in found:
        print(line)
    if found:
        return 1
    print("layers: no upward include (" + " > ".join(order) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
