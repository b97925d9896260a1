"""The findings written out: text like ruff's, JSON, or GitHub Actions annotations."""

import json

from scaffold.check.rules import Finding

FORMATS = ("text", "json", "github")


def format_findings(findings: list[Finding], fmt: str) -> str:
    """All findings in one of FORMATS, one line each (JSON: one document)."""
    if fmt == "json":
        return json.dumps([_as_dict(f) for f in findings], indent=2)
    if fmt == "github":
        return "\n".join(_annotation(f) for f in findings)
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
