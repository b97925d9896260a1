"""Re-render the committed example projects: `python examples/regenerate.py`.

tests/test_examples.py fails when a fresh render differs from what is committed here, so a
template change shows up in review as a readable diff of these files. Every task in copier.yml
has one example: the one named below, or else `<task>-minimal` with the defaults (a task added
to copier.yml without an example here). The table of examples in examples/README.md is
rewritten too.
"""

import re
import shutil
import sys
from dataclasses import fields
from pathlib import Path

from scaffold.options import OPTIONS, Options, project_names
from scaffold.render import ANSWERS_FILE, render_project

HERE = Path(__file__).resolve().parent

# One example per task, each showing several options; together they show every option.
NAMED = {
    "classification-full": Options(
        scheduler="plateau", amp=True, clip=True, early_stopping=True, compile=True
    ),
    "regression-warmup-accum": Options(
        task="regression", clip=True, grad_accum=3, warmup_steps=100
    ),
    "image-classification-distributed": Options(
        task="image-classification", distributed=True, early_stopping=True
    ),
    "text-classification-ema": Options(
        task="text-classification", scheduler="plateau", early_stopping=True, ema=True
    ),
}


def examples() -> dict[str, Options]:
    """The named examples, then `<task>-minimal` (all defaults) for each task they miss."""
    chosen = dict(NAMED)
    covered = {options.task for options in NAMED.values()}
    for task in OPTIONS["task"].choices:
        if task not in covered:
            chosen[f"{task}-minimal"] = Options(task=task)
    return chosen


def describe(options: Options) -> str:
    """The options as a table cell: what differs from the task's defaults is what was chosen."""
    if all(
        getattr(options, f.name) == getattr(Options(task=options.task), f.name)
        for f in fields(options)
    ):
        return f"{options.describe()} (all defaults)"
    return options.describe()


def readme_table() -> str:
    rows = [f"| `{name}/` | {describe(options)} |" for name, options in examples().items()]
    return "\n".join(["| folder | options |", "|---|---|", *rows]) + "\n"


def render_examples(root: Path) -> list[Path]:
    """Render every example into root/NAME, replacing what is there."""
    made = []
    for name, options in examples().items():
        dest = root / name
        shutil.rmtree(dest, ignore_errors=True)
        render_project(dest, *project_names(name), options)
        # The answers file records this machine's template path and commit: noise in a diff.
        (dest / ANSWERS_FILE).unlink()
        made.append(dest)
    return made


# The table in examples/README.md: from its header row to the first blank line.
TABLE = re.compile(r"^\| folder \| options \|\n(?:\|.*\n)*", re.M)


def write_readme_table(readme: Path) -> None:
    text = readme.read_text()
    if not TABLE.search(text):
        raise SystemExit(f"{readme}: no '| folder | options |' table to rewrite")
    readme.write_text(TABLE.sub(lambda _: readme_table(), text, count=1))


if __name__ == "__main__":
    for path in render_examples(HERE):
        print(f"rendered {path}", file=sys.stderr)
    write_readme_table(HERE / "README.md")
