#!/usr/bin/env python3
"""scripts/check_layers.py passes on the tree as it is and fails on a copy with one upward include
planted (src/common/ including a server header), naming the file, the line and the areas."""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "scripts", "check_layers.py")


def run(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


def main():
    clean = run(ROOT)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(tmp, "src"))
        os.mkdir(os.path.join(tmp, "docs"))
        shutil.copy(os.path.join(ROOT, "docs", "architecture.md"), os.path.join(tmp, "docs"))
        assert run(tmp).returncode == 0
        header = os.path.join(tmp, "src", "common", "status.h")
        with open(header) as f:
            lines = f.read().splitlines(keepends=True)
        planted = next(i for i, line in enumerate(lines) if line.startswith("#include")) + 1
        lines.insert(planted, '#include "server/inference_server.h"\n')
        with open(header, "w") as f:
            f.writelines(lines)
        bad = run(tmp)
        assert bad.returncode == 1, bad.stdout
        expected = (f"src/common/status.h:{planted + 1}: src/common/ includes server/, which is "
                    "above it in docs/architecture.md's layer order")
        assert bad.stdout.strip() == expected, bad.stdout
        # An area the page does not list is an error too (a new folder needs its place).
        os.mkdir(os.path.join(tmp, "src", "unlisted"))
        assert "src/unlisted/: an area" in run(tmp).stdout
    print("check_layers: clean tree passes, planted upward include fails")


if __name__ == "__main__":
    main()
