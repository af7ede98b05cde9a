"""Run a command with some tools hidden from PATH: the fresh machine that lacks them.

    python3 scripts/without_tools.py aarch64-linux-gnu-gcc -- make test

Every PATH folder that holds one of the tools is replaced, for the command only, by a
temporary folder of links to all its other entries; nothing is uninstalled. `.ci/run`
runs the README's `make test` this way so that a test which needs an optional tool and
forgets `@pytest.mark.tool(...)` goes red in CI, as it would on a newcomer's machine.
Standard library only: it runs before the venv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def shadow_path(path: str, hidden: set[str], into: Path) -> str:
    """PATH with each folder that holds a hidden tool replaced by a folder of links."""
    out: list[str] = []
    for i, folder in enumerate(path.split(os.pathsep)):
        d = Path(folder)
        if not folder or not d.is_dir() or not any((d / t).exists() for t in hidden):
            out.append(folder)
            continue
        shadow = into / f"{i}"
        shadow.mkdir()
        for entry in d.iterdir():
            if entry.name not in hidden:
                (shadow / entry.name).symlink_to(entry)
        out.append(str(shadow))
    return os.pathsep.join(out)


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == 0 or argv.index("--") == len(argv) - 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    split = argv.index("--")
    hidden, command = set(argv[:split]), argv[split + 1 :]
    with tempfile.TemporaryDirectory(prefix="without-tools-") as tmp:
        env = dict(os.environ, PATH=shadow_path(os.environ.get("PATH", ""), hidden, Path(tmp)))
        still = sorted(t for t in hidden if shutil.which(t, path=env["PATH"]))
        if still:
            print(f"without_tools: could not hide {', '.join(still)}", file=sys.stderr)
            return 2
        print(f"without_tools: {', '.join(sorted(hidden))} hidden from PATH for: {' '.join(command)}", flush=True)
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
