#!/usr/bin/env python3
"""scripts/check_layers.py passes on the tree as it is and fails on a copy with one upward include
planted (src/common/ including a server header), naming the file, the line and the areas, and on
a copy where a frontend file includes the server's implementation header (legal on its own, but
its closure reaches the repository the frontends are sealed from), naming the chain."""
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
        # (then the seal's lines: every frontend file now reaches the repository through it)
        assert bad.stdout.splitlines()[0] == expected, bad.stdout
        # A frontend file may include server/ directly, but not the header that brings the
        # repository, models and schedulers with it: the seal is checked on the include closure.
        shutil.copy(os.path.join(ROOT, "src", "common", "status.h"), header)
        assert run(tmp).returncode == 0
        frontend = os.path.join(tmp, "src", "frontend", "http", "http_api.cc")
        with open(frontend) as f:
            text = f.read()
        with open(frontend, "w") as f:
            f.write(text.replace('#include "common/base64.h"\n',
                                 '#include "common/base64.h"\n#include "server/inference_server.h"\n'))
        sealed = run(tmp)
        assert sealed.returncode == 1, sealed.stdout
        line = sealed.stdout.strip()
        assert line.startswith("src/frontend/http/http_api.cc: src/frontend/ is sealed from "
                               "repository/ but reaches it: src/frontend/http/http_api.cc -> "
                               "src/server/inference_server.h -> src/repository/"), line
        with open(frontend, "w") as f:
            f.write(text)
        assert run(tmp).returncode == 0
        # An area the page does not list is an error too (a new folder needs its place).
        os.mkdir(os.path.join(tmp, "src", "unlisted"))
        assert "src/unlisted/: an area" in run(tmp).stdout
    print("check_layers: clean tree passes, planted upward include fails")


if __name__ == "__main__":
    main()
