"""`scaffold check --fix`: the fixes that are unambiguous, made as text edits that keep the rest."""

import ast
import difflib
import io
import os
import stat
import tempfile
from dataclasses import dataclass, field
from itertools import groupby

from scaffold.check.files import Unreadable, read_source
from scaffold.check.rules import Finding

FIXABLE = ("SCF201", "SCF2301")


class NotFixable(Exception):
    """Why a finding is left as it is; its message completes `not fixed: ...`."""


@dataclass
class FileFix:
    """One file's text before and after its fixes, the findings fixed and those left, why."""

    path: str
    encoding: str
    before: str
    after: str
    fixed: list = field(default_factory=list)
    left: list = field(default_factory=list)  # (finding, reason)

    @property
    def changed(self) -> bool:
        return self.after != self.before

    def diff(self) -> str:
        lines = difflib.unified_diff(
            _lines(self.before), _lines(self.after), fromfile=self.path, tofile=self.path
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def plan_fixes(findings: list[Finding]) -> list[FileFix]:
    """The fixes of every file with a fixable finding; nothing is written."""
    fixable = sorted(f for f in findings if f.code in FIXABLE)
    plans = []
    for path, group in groupby(fixable, key=lambda f: f.path):
        group = list(group)
        try:
            plans.append(_plan(path, group))
        except Unreadable:  # changed or gone since it was checked
            plans.append(
                FileFix(path, "utf-8", "", "", left=[(f, "cannot read it again") for f in group])
            )
    return plans


def write_fix(fix: FileFix) -> None:
    """Replace the file by its fixed text in one step, keeping its mode; OSError if it cannot."""
    path = os.path.realpath(fix.path)  # a link keeps pointing at the fixed file
    mode = stat.S_IMODE(os.stat(path).st_mode)
    # Root may write anything; a file its owner made read-only is still left alone.
    if not mode & stat.S_IWUSR or not os.access(path, os.W_OK):
        raise PermissionError(f"{fix.path}: cannot write: read-only file; left unchanged")
    data = fix.after.encode(fix.encoding)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".scaffold-fix-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _plan(path: str, findings: list[Finding]) -> FileFix:
    # Read again (it may have changed since it was checked), the way the check reads it.
    read = read_source(path)
    text, tree = read.text, read.tree
    fix = FileFix(path, read.encoding, text, text)
    source = _Text(text)
    blocks = _blocks(tree)
    edits = []
    for finding in findings:
        try:
            if finding.code == "SCF2301":
                found = _add_weights_only(source, _call_at(tree, finding))
            else:
                found = _move_zero_grad(source, blocks, finding)
            if any(_overlap(a, b) for a in found for b in edits):
                raise NotFixable("another fix changes the same text")
        except NotFixable as err:
            fix.left.append((finding, str(err)))
            continue
        edits += found
        fix.fixed.append(finding)
    after = source.apply(edits)
    try:
        ast.parse(after)
    except (SyntaxError, ValueError):  # a bug in a fix above: never write a broken file
        fix.left += [(f, "the fixed file would not parse") for f in fix.fixed]
        fix.fixed = []
        return fix
    fix.after = after
    return fix


class _Text:
    """A file's text with ast positions (1-based lines, UTF-8 byte columns) turned to offsets."""

    def __init__(self, text: str):
        self.text = text
        # Line breaks as the tokenizer sees them: \n, \r\n and \r, nothing else.
        self.lines = io.StringIO(text, newline="").readlines()
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, byte_col: int) -> int:
        head = self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")
        return self.starts[line - 1] + len(head)

    def line_start(self, line: int) -> int:
        return self.starts[line - 1]

    def apply(self, edits: list) -> str:
        """The text with (start, end, new) edits made; inserts at one place keep their order."""
        pieces, at = [], 0
        for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
            pieces += [self.text[at:start], new]
            at = end
        return "".join(pieces) + self.text[at:]


def _overlap(one: tuple, other: tuple) -> bool:
    """Whether two edits touch the same text: ranges that share characters, or an insertion
    strictly inside a replaced range. Insertions at one place may both be made."""
    (a, b, _), (c, d, _) = one, other
    return max(a, c) < min(b, d) or (a == b and c < a < d) or (c == d and a < c < b)


# --- C3: torch.load(...) -> torch.load(..., weights_only=True) ---


def _call_at(tree: ast.Module, finding: Finding) -> ast.Call:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and (node.lineno, node.col_offset + 1) == (finding.line, finding.column)
            and not any(k.arg is None for k in node.keywords)
        ):
            return node
    raise NotFixable("no torch.load() call at this place")


def _add_weights_only(source: _Text, call: ast.Call) -> list:
    """The flag goes right after the last argument, or on a line of its own where the closing
    parenthesis is on a line of its own, as a formatter would write it."""
    text = source.text
    close = source.offset(call.end_lineno, call.end_col_offset) - 1
    if text[close] != ")":
        raise NotFixable("the call does not end in `)`")
    arguments = call.args + call.keywords
    if not arguments:
        return [(close, close, "weights_only=True")]
    last = max(arguments, key=lambda a: (a.end_lineno, a.end_col_offset))
    end = source.offset(last.end_lineno, last.end_col_offset)
    comma, code_end, i = None, end, end
    while i < close:  # between the last argument and `)`: its own parentheses, a comma, comments
        char = text[i]
        if char == "#":
            while i < close and text[i] not in "\r\n":
                i += 1
            continue
        if char == ")" and comma is None:
            code_end = i + 1
        elif char == "," and comma is None:
            comma = i
        elif not char.isspace():
            raise NotFixable("unexpected text before the closing parenthesis")
        i += 1
    paren_line = text.rfind("\n", 0, close) + 1
    if last.end_lineno < call.end_lineno and not text[paren_line:close].strip():
        # `)` on a line of its own: one more argument line, indented like the last one.
        first = source.lines[last.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        newline = _ending(source.lines[last.end_lineno - 1]) or "\n"
        added = [(paren_line, paren_line, f"{indent}weights_only=True,{newline}")]
        return added if comma is not None else [(code_end, code_end, ","), *added]
    if comma is None:
        return [(code_end, code_end, ", weights_only=True")]
    return [(comma + 1, comma + 1, " weights_only=True,")]


# --- R2: zero_grad() between backward() and step() moves to just before the backward ---


def _blocks(tree: ast.Module) -> dict:
    """id(statement) -> (the statement list it is in, its index there)."""
    where = {}
    for node in ast.walk(tree):
        for value in ast.iter_fields(node):
            body = value[1]
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                for index, statement in enumerate(body):
                    where[id(statement)] = (body, index)
    return where


def _move_zero_grad(source: _Text, blocks: dict, finding: Finding) -> list:
    """Only a `X.zero_grad(...)` line of its own, after the one statement of its block that
    runs backward() (directly or nested in it), moves: just before that statement's line."""
    statement = next(
        (
            body[index]
            for body, index in blocks.values()
            if _is_zero_grad(body[index], finding.line, finding.column)
        ),
        None,
    )
    if statement is None:
        raise NotFixable("zero_grad() is not a statement of its own here")
    body, index = blocks[id(statement)]
    if not _alone(source, statement):
        raise NotFixable("zero_grad() is not alone on its line")
    backwards = [i for i in range(index) if _calls(body[i], {"backward", "manual_backward"})]
    if not backwards:
        raise NotFixable("no backward() before it in the same block")
    if len(backwards) > 1:
        raise NotFixable("several backward() calls before it in this block")
    target = body[backwards[0]]
    if not _alone(source, target, whole=False):
        raise NotFixable("the backward() statement shares its line")
    between = body[backwards[0] : index]
    if any(_calls(s, {"step"}) for s in between):
        raise NotFixable("a step() runs between backward() and it")
    used = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}
    if used & _assigned(between):
        raise NotFixable("what it calls is assigned between backward() and it")
    line = source.lines[statement.lineno - 1]
    start = source.line_start(statement.lineno)
    moved_to = source.line_start(target.lineno)
    # The file's last line may have no line break; the moved copy takes the target's.
    moved = line.rstrip("\r\n") + _ending(source.lines[target.lineno - 1])
    return [(start, start + len(line), ""), (moved_to, moved_to, moved)]


def _is_zero_grad(node: ast.stmt, line: int, column: int) -> bool:
    call = node.value if isinstance(node, ast.Expr) else None
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "zero_grad"
        and (call.lineno, call.col_offset + 1) == (line, column)
    )


def _alone(source: _Text, statement: ast.stmt, whole: bool = True) -> bool:
    """Whether only indentation comes before the statement on its first line and, when
    `whole`, it is one line with nothing after it but a comment."""
    first = source.lines[statement.lineno - 1].encode("utf-8")
    if first[: statement.col_offset].strip():
        return False
    if not whole:
        return True
    if statement.end_lineno != statement.lineno:
        return False
    rest = first[statement.end_col_offset :].strip()
    return not rest or rest.startswith(b"#")


def _calls(statement: ast.stmt, names: set) -> bool:
    """Whether the statement runs a call of one of these method names, outside nested
    functions and classes (defined there, not run)."""
    todo = [statement]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in names:
                return True
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not isinstance(child, ast.Lambda):
                    todo.append(child)
    return False


def _assigned(statements: list) -> set:
    names = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def _lines(text: str) -> list:
    return io.StringIO(text, newline="").readlines()
