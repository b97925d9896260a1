"""The findings written out: text like ruff's, JSON, GitHub Actions annotations or SARIF."""

import json
import os
from pathlib import Path
from urllib.parse import quote

from scaffold import __version__
from scaffold.check.rules import RULES, Finding

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def format_findings(findings: list[Finding], fmt: str) -> str:
    """All findings in one of FORMATS, one line each (JSON and SARIF: one document)."""
    if fmt == "json":
        return json.dumps([_as_dict(f) for f in findings], indent=2)
    if fmt == "github":
        return "\n".join(_annotation(f) for f in findings)
    if fmt == "sarif":
        return json.dumps(sarif(findings), indent=2)
    return "\n".join(text_line(f) for f in findings)


def text_line(finding: Finding) -> str:
    """`path:line:col: SCF201 message; fix (R2)`."""
    rule = finding.rule
    where = f"{finding.path}:{finding.line}:{finding.column}"
    return f"{where}: {finding.code} {rule.message}; {rule.fix} ({rule.rule})"


def _as_dict(finding: Finding) -> dict:
    rule = finding.rule
    return {
        "path": finding.path,
        "line": finding.line,
        "column": finding.column,
        "code": finding.code,
        "rule": rule.rule,
        "message": rule.message,
        "fix": rule.fix,
    }


def _annotation(finding: Finding) -> str:
    # GitHub's workflow command syntax: properties and message escape differently.
    rule = finding.rule
    message = _escape(f"{finding.code} {rule.message}; {rule.fix} ({rule.rule})")
    path = _escape(finding.path).replace(":", "%3A").replace(",", "%2C")
    return (
        f"::error title=scaffold check {finding.code},file={path},"
        f"line={finding.line},col={finding.column}::{message}"
    )


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def sarif(findings: list[Finding], root: Path | None = None) -> dict:
    """One SARIF 2.1.0 run, as code scanning (GitHub's, an IDE's) reads it: every rule once in
    the driver, each finding a result at a path relative to `root` (the current folder)."""
    root = Path.cwd() if root is None else root
    codes = list(RULES)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "scaffold check",
                        "version": __version__,
                        "rules": [_sarif_rule(RULES[code]) for code in codes],
                    }
                },
                # Relative paths resolve against the folder the check ran in.
                "originalUriBaseIds": {"SRCROOT": {"uri": root.as_uri() + "/"}},
                "results": [_sarif_result(f, codes.index(f.code), root) for f in findings],
            }
        ],
    }


def _sarif_rule(rule) -> dict:
    return {
        "id": rule.code,
        "shortDescription": {"text": rule.message},
        "help": {"text": f"{rule.fix} ({rule.rule})"},
        "defaultConfiguration": {"level": "error"},
        "properties": {"loopRule": rule.rule},
    }


def _sarif_result(finding: Finding, index: int, root: Path) -> dict:
    rule = finding.rule
    return {
        "ruleId": finding.code,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": f"{rule.message}; {rule.fix} ({rule.rule})"},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact(finding.path, root),
                    "region": {"startLine": finding.line, "startColumn": finding.column},
                }
            }
        ],
    }


def _artifact(path: str, root: Path) -> dict:
    """A path under `root` as a relative URI with forward slashes; one outside it as file://."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(relative.as_posix()), "uriBaseId": "SRCROOT"}
