"""Re-render the committed example projects: `python examples/regenerate.py`.

tests/test_examples.py fails when a fresh render differs from what is committed here, so a
template change shows up in review as a readable diff of these files.
"""

import shutil
import sys
from pathlib import Path

from scaffold.options import Options, project_names
from scaffold.render import ANSWERS_FILE, render_project

EXAMPLES = {
    "classification-minimal": Options(),
    "classification-full": Options(scheduler="plateau", amp=True, clip=True, early_stopping=True),
    "regression-cosine-clip": Options(task="regression", clip=True),
}


def render_examples(root: Path) -> list[Path]:
    """Render every example into root/NAME, replacing what is there."""
    made = []
    for name, options in EXAMPLES.items():
        dest = root / name
        shutil.rmtree(dest, ignore_errors=True)
        render_project(dest, *project_names(name), options)
        # The answers file records this machine's template path and commit: noise in a diff.
        (dest / ANSWERS_FILE).unlink()
        made.append(dest)
    return made


if __name__ == "__main__":
    for path in render_examples(Path(__file__).resolve().parent):
        print(f"rendered {path}", file=sys.stderr)
