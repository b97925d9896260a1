"""Documents read from files: a CSV file with a text and a label column, or a folder with a
sub-folder of .txt files per class; every line and file checked, every refusal with its place."""

import csv
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .inputs import DataError
from .task import class_order, parse_label

# Limits that turn an endless or mistaken input into an error instead of a full memory.
MAX_LINE_CHARS = 1 << 24  # one physical line of a CSV file (a long document on one line fits)
MAX_FILE_BYTES = 1 << 26  # one .txt document: 64 MiB
TEXT_SUFFIXES = (".txt",)


def _check_regular_file(path: Path) -> None:
    # A device or pipe (/dev/zero, a FIFO) never ends or blocks: refuse it up front.
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    except ValueError:  # a NUL character in the path
        raise DataError(f"cannot read {str(path)!r}: not a valid path") from None
    if not stat.S_ISREG(mode):
        raise DataError(f"{path} is not a regular file (a device or pipe); save it to a file")


def _not_utf8(path: Path, line: int, column: int, byte: int) -> DataError:
    return DataError(f"{path}:{line}:{column}: byte 0x{byte:02x} is not UTF-8; save it as UTF-8")


def _lines(f, path: Path) -> Iterator[str]:
    """The file's lines for csv.reader, each checked for length and for valid UTF-8."""
    for number, line in enumerate(iter(lambda: f.readline(MAX_LINE_CHARS + 1), ""), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise DataError(f"{path}:{number}: line longer than {MAX_LINE_CHARS} characters")
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as err:  # undecodable bytes, kept as lone surrogates
                raise _not_utf8(
                    path, number, err.start + 1, ord(line[err.start]) - 0xDC00
                ) from None
        yield line


def read_csv(path: Path, text_column: str, target: str | None) -> tuple[list[str], list[str]]:
    """The texts and parsed labels of a CSV file with a header row; other columns are ignored.

    target None: no labels are read (the column may be absent), for prediction.
    """
    _check_regular_file(path)
    text_column = text_column.strip()
    target = target.strip() if target is not None else None
    texts: list[str] = []
    labels: list[str] = []
    old_limit = csv.field_size_limit(MAX_LINE_CHARS)  # a document may be long
    try:
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
            reader = csv.reader(_lines(f, path))
            header = [name.strip() for name in _next_row(reader, path)[1] or []]
            if not header:
                raise DataError(f"{path} is empty; it needs a header row and one row per document")
            for name in (text_column, target) if target is not None else (text_column,):
                if name not in header:
                    raise DataError(f"{path}: no column '{name}' (columns: {', '.join(header)})")
                if header.count(name) > 1:
                    raise DataError(f"{path}:1: column '{name}' appears twice; name it once")
            t = header.index(text_column)
            y = header.index(target) if target is not None else None
            while True:
                line, row = _next_row(reader, path)
                if row is None:
                    break
                if not row:
                    continue  # a blank line
                if len(row) != len(header):
                    raise DataError(
                        f"{path}:{line}: {len(row)} fields, the header has {len(header)}"
                    )
                if y is not None:
                    try:
                        labels.append(parse_label(row[y]))
                    except ValueError as err:
                        raise DataError(f"{path}:{line}:{y + 1}: label '{target}' {err}") from None
                texts.append(row[t])
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    finally:
        csv.field_size_limit(old_limit)
    if not texts:
        raise DataError(f"{path}: no documents; it needs a header row and one row per document")
    return texts, labels


def _next_row(reader, path: Path) -> tuple[int, list[str] | None]:
    line = reader.line_num + 1
    try:
        return line, next(reader)
    except StopIteration:
        return line, None
    except csv.Error as err:
        raise DataError(f"{path}:{line}: not valid CSV ({err}); check the quoting") from None


def read_folder(root: Path) -> tuple[list[str], list[str], tuple[list[str], list[str]] | None]:
    """Texts and labels of the .txt files below DIR/<class>/ (at any depth), or of DIR/train
    and DIR/val (then also the validation texts and labels, the fixed split)."""
    train, val = root / "train", root / "val"
    if train.is_dir() or val.is_dir():
        if not (train.is_dir() and val.is_dir()):
            have, lack = ("train", "val") if train.is_dir() else ("val", "train")
            raise DataError(
                f"{root} has a {have}/ folder but no {lack}/ folder; a split needs both"
            )
        texts, labels = _read_classes(train)
        val_texts, val_labels = _read_classes(val)
        only = sorted(set(val_labels) - set(labels), key=class_order)
        if only:
            raise DataError(f"{root}: val/ has classes that train/ lacks: {', '.join(only)}")
        return texts, labels, (val_texts, val_labels)
    texts, labels = _read_classes(root)
    return texts, labels, None


def _read_classes(root: Path) -> tuple[list[str], list[str]]:
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as err:
        raise DataError(f"cannot read {root}: {err.strerror}") from None
    if not folders:
        raise DataError(f"{root} has no class folders; put each class's .txt files in its own")
    texts: list[str] = []
    labels: list[str] = []
    for folder in folders:
        # Every .txt file below the class folder, as evaluate and predict read it.
        files = text_files(folder, required=False)
        if not files:
            raise DataError(f"{folder} holds no .txt files; every class needs documents")
        for path in files:
            texts.append(read_text(path))
            labels.append(folder.name)
    return texts, labels


def read_text(path: Path) -> str:
    _check_regular_file(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise DataError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB; one file, one document")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        before = raw[: err.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        raise _not_utf8(path, line, column, raw[err.start]) from None


def text_files(root: Path, required: bool = True) -> list[Path]:
    """Every .txt file below root at any depth, sorted; hidden files and folders are not read
    (.ipynb_checkpoints, editors' backups), and a folder that cannot be read is an error."""

    def refuse(err: OSError):
        raise DataError(f"cannot read {err.filename}: {err.strerror}")

    files = []
    for folder, folders, names in os.walk(root, onerror=refuse):
        folders[:] = [name for name in folders if not name.startswith(".")]
        files += [
            Path(folder) / name
            for name in names
            if Path(name).suffix.lower() in TEXT_SUFFIXES and not name.startswith(".")
        ]
    if not files and required:
        raise DataError(f"{root} holds no .txt files; give a CSV file or a folder of .txt files")
    return sorted(files)


def read_labelled_folder(root: Path) -> tuple[list[str], list[str], list[str]]:
    """Texts, class names and ids (paths inside root) of the .txt files in root/<class>/."""
    texts: list[str] = []
    labels: list[str] = []
    ids: list[str] = []
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as err:
        raise DataError(f"cannot read {root}: {err.strerror}") from None
    for folder in folders:
        for path in text_files(folder, required=False):  # a class may have no documents
            texts.append(read_text(path))
            labels.append(folder.name)
            ids.append(path.relative_to(root).as_posix())
    if not texts:
        raise DataError(f"{root} has no class folders with .txt files; put each class's in one")
    return texts, labels, ids
