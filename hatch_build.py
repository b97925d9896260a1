"""Wheel build hook: pack the template's git history into the wheel as a bundle.

A project keeps a pointer to the template version it was rendered from; `copier update`
needs that old version to compute the user's edits. A plain folder in site-packages has no
history, so the wheel also carries `git bundle` of this repository (a single file that git and
copier read as a repository) plus the commit it was built from.
"""

import json
import subprocess
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class TemplateBundleHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        if self.target_name != "wheel" or version == "editable" or not (root / ".git").exists():
            return  # editable installs use the checkout itself; an sdist has no history

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", *args], cwd=root, check=True, capture_output=True, text=True
            ).stdout.strip()

        if git("status", "--porcelain", "--", "copier.yml", "template"):
            self.app.display_warning(
                "template/ has uncommitted changes: the wheel's bundle holds the last commit"
            )
        out = Path(tempfile.mkdtemp(prefix="scaffold-bundle-"))
        git("bundle", "create", str(out / "template.bundle"), "--all")
        meta = {
            "commit": git("rev-parse", "HEAD"),
            "commits": int(git("rev-list", "--count", "HEAD")),
        }
        (out / "bundle.json").write_text(json.dumps(meta) + "\n")
        for name in ("template.bundle", "bundle.json"):
            build_data["force_include"][str(out / name)] = f"scaffold/_template/{name}"
