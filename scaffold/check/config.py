"""`[tool.scaffold.check]` in pyproject.toml: the settings a project keeps for `scaffold check`."""

import os
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from scaffold.check.rules import unknown_selectors
from scaffold.errors import UsageError

# select/ignore: codes, prefixes or rules, as the flags take them; extend-ignore: ignored even
# when --ignore is given; exclude: glob patterns of paths to skip, relative to pyproject.toml.
KEYS = ("select", "ignore", "extend-ignore", "exclude")


class ConfigError(UsageError):
    """A pyproject.toml that cannot be used: one line naming the file, exit code 2."""


@dataclass
class Settings:
    """The settings in force: the file's, with the command line's flags in their place."""

    select: list = field(default_factory=list)
    ignore: list = field(default_factory=list)
    extend_ignore: list = field(default_factory=list)
    exclude: list = field(default_factory=list)
    root: Path | None = None  # the folder of the pyproject.toml they came from
    source: Path | None = None

    def with_flags(self, select: list, ignore: list) -> "Settings":
        """A flag given replaces the file's setting of the same name."""
        return Settings(
            select=select or self.select,
            ignore=ignore or self.ignore,
            extend_ignore=self.extend_ignore,
            exclude=self.exclude,
            root=self.root,
            source=self.source,
        )

    @property
    def ignored(self) -> list:
        return self.ignore + self.extend_ignore

    def excluded(self, path: str) -> bool:
        """Whether an `exclude` pattern matches the path, relative to the settings' folder, or
        one of the folders it is in; a pattern without `/` matches a name at any depth."""
        if not self.exclude:
            return False
        relative = Path(os.path.relpath(os.path.abspath(path), self.root)).as_posix()
        parts = PurePosixPath(relative).parts
        if not parts or parts[0] == "..":  # outside the project: only its own name counts
            parts = (os.path.basename(path),)
        for pattern in self.exclude:
            pattern = pattern.removeprefix("./").rstrip("/")
            if "/" not in pattern:
                if any(fnmatchcase(name, pattern) for name in parts):
                    return True
            elif any(fnmatchcase("/".join(parts[: i + 1]), pattern) for i in range(len(parts))):
                return True
        return False


def load_settings(start: Path | None = None) -> Settings:
    """The settings of the nearest pyproject.toml at or above `start` (the current folder)
    that has a [tool.scaffold.check] table, as ruff finds its own; defaults without one."""
    folder = Path(os.path.abspath(start or Path.cwd()))
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        table = _check_table(path)
        if table is not None:
            return _settings(table, path)
    return Settings()


def _check_table(path: Path) -> dict | None:
    """The [tool.scaffold.check] table of one pyproject.toml, None without one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    if "scaffold" not in text:  # not ours, and no need to parse it
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ConfigError(f"{path}: reading it needs Python 3.11, or tomli") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    table = data.get("tool", {}).get("scaffold", {})
    if not isinstance(table, dict) or "check" not in table:
        return None
    if not isinstance(table["check"], dict):
        raise ConfigError(f"{path}: tool.scaffold.check must be a table")
    return table["check"]


def _settings(table: dict, path: Path) -> Settings:
    where = f"{path}: [tool.scaffold.check]"
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where} has no setting {unknown[0]!r}; settings: {', '.join(KEYS)}")
    values = {}
    for key, value in table.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f'{where} {key} must be a list of strings, e.g. ["SCF201"]')
        if key != "exclude":
            bad = unknown_selectors(value)
            if bad:
                raise ConfigError(f"{where} {key}: no check is named {bad[0]!r}")
        values[key.replace("-", "_")] = [v.strip() for v in value]
    return Settings(**values, root=path.parent, source=path)
