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
    # The saves of the other files with a finding in the same folder: a checkpoint saved in one
    # module (Swin's utils.py) and loaded in its neighbour.
    others = []
    for path in sorted({f.path for f in findings}):
        try:
            others.append((path, read_source(path).tree))
        except Unreadable:
            pass
    for path, group in groupby(fixable, key=lambda f: f.path):
        group = list(group)
        try:
            here = os.path.dirname(os.path.abspath(path))
            near = [
                o for o in others if o[0] != path and os.path.dirname(os.path.abspath(o[0])) == here
            ]
            plans.append(_plan(path, group, near))
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


def _plan(path: str, findings: list[Finding], others=()) -> FileFix:
    # Read again (it may have changed since it was checked), the way the check reads it.
    read = read_source(path)
    text, tree = read.text, read.tree
    fix = FileFix(path, read.encoding, text, text)
    saved = saved_objects([(path, tree), *others])
    source = _Text(text)
    blocks = _blocks(tree)
    edits = []
    for finding in findings:
        try:
            if finding.code == "SCF2301":
                call = _call_at(tree, finding)
                _loads_only_tensors(tree, call, saved)
                found = _add_weights_only(source, call)
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


# What weights_only=True loads: tensors, numbers, strings, and lists, tuples and dicts of them.
# Anything else in the file (a whole pickled model, an argparse Namespace, a yacs config, a numpy
# array) raises UnpicklingError. The load site cannot see the file, so the fix is made only where
# the result is used as a state dict: handed to load_state_dict(), read by key and handed on, or
# read for its numbers; everywhere else the finding stays, with how to proceed.
NOT_SAFE = (
    "its result is {why}, which may hold pickled objects (a whole model, an argparse.Namespace, "
    "a config) that weights_only=True refuses. Before torch 2.6 this load unpickles anything (a "
    "crafted file runs code); from 2.6 weights_only defaults to True and the load already fails "
    "on such a file. For a file you trust, pass weights_only=False; else allow its classes with "
    "torch.serialization.add_safe_globals([...]) and pass weights_only=True"
)
# Dict and tensor methods that read a state dict or its values as what they are.
PLAIN_METHODS = {
    "keys", "items", "values", "get", "pop", "copy", "to", "cpu", "cuda", "float", "half",
    "item", "tolist", "size", "numel", "clone", "detach", "shape", "dtype", "startswith",
}  # fmt: skip
# Keys that name a pickled object more often than tensors, when read and not given to
# load_state_dict (yolov5 saves `"model": deepcopy(model).half()`, DeiT and Swin `"args"`).
OBJECT_KEYS = ("arg", "config", "cfg", "opt", "hyp", "hparam", "model", "net", "vocab", "token")


def _loads_only_tensors(tree: ast.Module, call: ast.Call, saved=()) -> None:
    """NotFixable unless the loaded value is only used as tensors and plain containers. A load
    read by key (a checkpoint dict) is left too when `saved` names an object a save beside it
    puts in a dict (Swin's `'config': config`): unread keys are unpickled too."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    why = _value_use(parents, call)
    if why is None:
        return
    if why != "name":
        raise NotFixable(NOT_SAFE.format(why=why))
    keyed = False
    statement = parents[call]
    name = statement.targets[0].id
    scope = parents.get(statement)
    while scope is not None and not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        scope = parents.get(scope)
    if scope is None:
        raise NotFixable(NOT_SAFE.format(why=f"a module-level name ({name}) other files may use"))
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            why = _value_use(parents, node)
            if why == "name":  # state_dict = state_dict["model"]: read on as the same name
                target = parents[node] if not isinstance(parents[node], ast.Subscript) else None
                why = None if target is None else f"copied to {target.targets[0].id}"
            if why is not None:
                raise NotFixable(NOT_SAFE.format(why=why))
            keyed = keyed or _by_key(parents, node)
    # Handed whole to load_state_dict, the file is a state dict; read by key, it is a checkpoint
    # dict whose other keys are unpickled too, and a save beside it may put objects there.
    if keyed and saved:
        why = f"a checkpoint, and a save beside it stores {saved[0]}"
        raise NotFixable(NOT_SAFE.format(why=why))


def _by_key(parents: dict, node) -> bool:
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return True
    return isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop", "items", "values")


NUMBER_WORDS = ("epoch", "step", "iter", "acc", "loss", "best", "lr", "score", "metric", "arch")


def saved_objects(trees: list) -> list:
    """`name (path:line)` for each value a save of these files puts in a checkpoint dict that is
    not a state dict, a number or a string: a config, an argparse.Namespace, a model object."""
    found = []
    for path, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if not name.lower().startswith("save"):
                continue
            for value in _dict_values(tree, node):
                if not _plain(value):
                    found.append(f"{ast.unparse(value)[:40]} ({path}:{value.lineno})")
    return found


def _dict_values(tree, call) -> list:
    """The values of the dict a save call is given: a literal, or one built in a name."""
    values = []
    for arg in call.args[:1]:
        if isinstance(arg, ast.Dict):
            values += arg.values
        elif isinstance(arg, ast.Name):
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                    if any(isinstance(t, ast.Name) and t.id == arg.id for t in node.targets):
                        values += node.value.values
                elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == arg.id
                    for t in node.targets
                ):
                    values.append(node.value)
    return [v for v in values if v is not None]


def _plain(value) -> bool:
    if isinstance(value, ast.Constant | ast.BinOp | ast.UnaryOp | ast.Compare | ast.JoinedStr):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in ("state_dict", "get_rng_state", "getstate", "item", "int", "float", "str")
    if isinstance(value, ast.Name | ast.Attribute):
        last = (value.id if isinstance(value, ast.Name) else value.attr).lower()
        return any(w in last for w in NUMBER_WORDS)
    if isinstance(value, ast.Dict):
        return all(_plain(v) for v in value.values if v is not None)
    return False


def _value_use(parents: dict, node) -> str | None:
    """None when a loaded value (or a name bound to it) is used as a state dict here; "name" when
    it is bound to a plain name whose uses decide; else how it is used, for the message."""
    parent = parents.get(node)
    keys = []
    while isinstance(parent, ast.Subscript) and parent.value is node:  # ckpt["model"]["w"]
        keys.append(parent.slice)
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr not in PLAIN_METHODS:
            return f"used through .{parent.attr}"
        if parent.attr in ("get", "pop"):
            call = parents.get(parent)
            keys += list(getattr(call, "args", [])[:1])
            node, parent = call, parents.get(call)
        else:
            return None
    if isinstance(parent, ast.Call) and node in parent.args:
        name = (
            parent.func.attr
            if isinstance(parent.func, ast.Attribute)
            else getattr(parent.func, "id", "")
        )
        if name in ("load_state_dict", "set_state_dict", "load_state"):
            return None
        if name in ("int", "float", "str", "len", "print", "round", "max", "min", "bool", "format"):
            return None
        return f"handed to {name}()"
    if isinstance(parent, ast.keyword):
        return "handed to a call"
    if isinstance(parent, ast.Compare | ast.BinOp | ast.FormattedValue | ast.comprehension):
        return None
    if isinstance(parent, ast.Assign) and parent.value is node:
        target = parent.targets[0] if len(parent.targets) == 1 else None
        if not keys:
            return "name" if isinstance(target, ast.Name) else "stored as an attribute"
        words = {
            k.value.lower()
            for k in keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
        if not words or any(w.startswith(OBJECT_KEYS) or w.endswith(OBJECT_KEYS) for w in words):
            return f"read by key ({', '.join(sorted(words)) or 'a computed key'}) and kept"
        return None  # start_epoch = ckpt["epoch"]: a number
    if isinstance(parent, ast.Return):
        return "returned"
    return "used in a way this fix cannot follow"


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
