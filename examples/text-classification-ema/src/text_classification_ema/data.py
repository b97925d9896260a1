"""Data: built-in synthetic documents, a CSV file or a folder of text files; a seeded split; a
vocabulary from the training split; batches padded to their own longest document."""

import csv
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import content_digest
from .inputs import DataError
from .interface import UnknownLabel
from .seed import ResumableOrder
from .synthetic import CLASSES, make_documents
from .task import Task, class_order, parse_label
from .tokens import PAD, TOKEN, UNK, Vocabulary

__all__ = [
    "DATA_FLAGS",
    "Batches",
    "Data",
    "DataError",
    "DataSettings",
    "NewData",
    "Split",
    "load_data",
]


# The data settings that train.py also takes as flags: name -> (metavar, help).
DATA_FLAGS = {
    "data": ("PATH", "CSV file, or folder with a sub-folder of .txt files per class"),
    "text_column": ("NAME", "CSV column holding the text (default: text)"),
    "target": ("NAME", "CSV column holding the label (default: target)"),
}


@dataclass
class DataSettings:
    """Where the documents come from, how they are split, cut and batched; Config inherits
    these settings."""

    # A CSV file with a text and a label column, or a folder with one sub-folder of .txt files
    # per class (or train/ and val/ folders that each hold them); None: synthetic documents.
    data: str | None = None
    text_column: str = "text"  # CSV column holding each document's text
    target: str = "target"  # CSV column holding each document's label
    val_fraction: float = 0.2  # share of the documents held out, unless the folder has val/
    n_samples: int = 4096  # synthetic documents: how many
    max_length: int = 256  # tokens kept per document; the rest is cut off
    vocab_size: int = 20000  # words kept: the most frequent in the training split
    min_freq: int = 2  # words seen fewer times in the training split become <unk>
    # Training batches take documents of similar length from a shuffled window of this many
    # batches, so they pad little; 1: fully random batches.
    bucket_batches: int = 50

    def data_checks(self) -> list[tuple[bool, str]]:
        return [
            (0.0 < self.val_fraction < 1.0, "val_fraction must be between 0 and 1"),
            (4 <= self.n_samples <= 10**7, "n_samples must be between 4 and 10000000"),
            (1 <= self.max_length <= 10**6, "max_length must be between 1 and 1000000"),
            (3 <= self.vocab_size <= 10**7, "vocab_size must be between 3 and 10000000"),
            (1 <= self.min_freq <= 10**9, "min_freq must be between 1 and 1000000000"),
            (1 <= self.bucket_batches <= 10**6, "bucket_batches must be between 1 and 1000000"),
            (str(self.text_column).strip() != "", "text_column must name a CSV column"),
            (str(self.target).strip() != "", "target must name a CSV column"),
            (
                str(self.text_column).strip() != str(self.target).strip(),
                "text_column and target must be different columns",
            ),
        ]


@dataclass
class Split:
    """Documents as token ids laid end to end, with where each starts and how long it is."""

    tokens: torch.Tensor  # int64 token ids of every document, one after another
    starts: torch.Tensor  # int64, (documents,): where each document's ids begin
    lengths: torch.Tensor  # int64, (documents,): how many ids it has (at least 1)
    targets: torch.Tensor  # int64 class indices
    bucket_batches: int = 1  # training: batch documents of similar length (see DataSettings)

    @classmethod
    def from_ids(cls, ids: list[list[int]], targets: torch.Tensor, bucket_batches: int = 1):
        lengths = torch.tensor([len(one) for one in ids], dtype=torch.int64)
        starts = torch.cumsum(lengths, 0) - lengths
        tokens = torch.tensor([i for one in ids for i in one], dtype=torch.int64)
        return cls(tokens, starts, lengths, targets, bucket_batches)

    def __len__(self) -> int:
        return len(self.targets)


@dataclass
class Data:
    train: Split
    val: Split
    task: Task
    vocabulary: Vocabulary  # built from the training documents; saved with checkpoints
    max_length: int
    # A hash of every document's ids and label (checkpoint.content_digest), saved with
    # checkpoints: a resume on documents or labels edited since is refused.
    digest: str = ""

    @property
    def input_shape(self) -> tuple[int, ...]:
        # A document is up to max_length ids below the vocabulary's size: in one-hot terms, a
        # (length, vocabulary) matrix. The model needs the vocabulary's size for its embeddings.
        return (self.max_length, len(self.vocabulary))

    def state_dict(self) -> dict:
        return {
            "vocabulary": self.vocabulary.state_dict(),
            "max_length": self.max_length,
            "task": self.task.state_dict(),
            "content_digest": self.digest,
        }


def load_data(cfg) -> Data:
    """The documents of a run: read or made, split, and encoded with the training vocabulary."""
    generator = torch.Generator().manual_seed(cfg.seed)  # split and synthetic data follow the seed
    val = None
    if cfg.data:
        path = Path(cfg.data)
        if path.is_dir():
            texts, labels, val = read_folder(path)
        else:
            texts, labels = read_csv(path, cfg.text_column, cfg.target)
        try:
            task, targets = Task.from_labels(labels + (val[1] if val else []))
        except ValueError as err:
            raise DataError(f"{cfg.data}: {err}") from None
        if val is not None:
            val = (val[0], targets[len(labels) :])
            targets = targets[: len(labels)]
    else:
        seed = int(torch.randint(2**31, (1,), generator=generator))
        texts, indices = make_documents(cfg.n_samples, seed)
        task, targets = Task(list(CLASSES)), torch.tensor(indices, dtype=torch.int64)
    if val is None:  # a seeded split of the one set of documents
        n = len(texts)
        n_val = round(n * cfg.val_fraction)
        if n_val < 1 or n - n_val < 1:
            raise DataError(f"{n} documents cannot be split into training and validation sets")
        order = torch.randperm(n, generator=generator)
        train_index, val_index = order[n_val:], order[:n_val]
        val = ([texts[i] for i in val_index.tolist()], targets[val_index])
        texts, targets = [texts[i] for i in train_index.tolist()], targets[train_index]
    # The vocabulary sees the training documents only: validation words stay unknown to it.
    vocabulary = Vocabulary.build(texts, cfg.vocab_size, cfg.min_freq)
    encode = vocabulary.encode
    if cfg.data:  # what the run made of its documents, as the other tasks say of their data
        print(
            f"data: {len(texts) + len(val[0])} documents of {cfg.data} "
            f"({len(texts)} training, {len(val[0])} validation); {len(task.classes)} classes; "
            f"vocabulary of {len(vocabulary)} words (the training documents' words seen "
            f"{cfg.min_freq}+ times, at most {cfg.vocab_size}, with <pad> and <unk>)",
            flush=True,
        )
    train = Split.from_ids(
        [encode(text, cfg.max_length) for text in texts], targets, cfg.bucket_batches
    )
    val = Split.from_ids([encode(text, cfg.max_length) for text in val[0]], val[1])
    return Data(
        train=train,
        val=val,
        task=task,
        vocabulary=vocabulary,
        max_length=cfg.max_length,
        digest=content_digest(*(t for s in (train, val) for t in (s.tokens, s.lengths, s.targets))),
    )


# ---------------------------------------------------------------------------------------------
# Reading documents

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
        files = _text_files(folder, required=False)
        if not files:
            raise DataError(f"{folder} holds no .txt files; every class needs documents")
        for path in files:
            texts.append(_read_text(path))
            labels.append(folder.name)
    return texts, labels


def _read_text(path: Path) -> str:
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


# ---------------------------------------------------------------------------------------------
# New documents, for prediction and evaluation


class NewData:
    """Documents the model has not seen, encoded with its training vocabulary.

    Words the vocabulary lacks become <unk>, as validation words did in training, and each
    document is cut at the run's max_length.
    """

    def __init__(self, state: dict, cfg) -> None:
        # A checkpoint's entries are checked before use (ValueError): an edited one is refused.
        saved = state["vocabulary"]
        words = saved.get("words") if isinstance(saved, dict) else None
        if not (isinstance(words, list) and len(words) >= 2 and all(type(w) is str for w in words)):
            raise ValueError("'vocabulary' is not a dict with a list of its words")
        max_length = state["max_length"]
        if not (type(max_length) is int and max_length >= 1):
            raise ValueError(f"'max_length' is {max_length!r}, not a whole number above 0")
        self.vocabulary = Vocabulary(words)
        self.max_length = max_length
        self.input_shape = (self.max_length, len(self.vocabulary))
        self.text_column, self.target = cfg.text_column, cfg.target

    def read(self, path: str, task: Task, labelled: bool) -> tuple[list[str], Split]:
        """A CSV file (ids: row numbers, 1 the first after the header), one .txt file, or a
        folder: of .txt files anywhere below it (ids: their paths inside it), or, labelled, of
        one folder of .txt files per class, named as in training."""
        root = Path(path)
        if root.is_dir():
            if labelled:
                texts, labels, ids = _read_labelled_folder(root)
            else:
                files = _text_files(root)
                texts, labels = [_read_text(p) for p in files], []
                ids = [p.relative_to(root).as_posix() for p in files]
        elif root.suffix.lower() in TEXT_SUFFIXES:
            if labelled:
                raise DataError(
                    f"{root} is one document without a label; evaluate reads a CSV file with "
                    "the label column or a folder with one folder of .txt files per class"
                )
            texts, labels, ids = [_read_text(root)], [], [root.name]
        else:
            texts, labels = read_csv(root, self.text_column, self.target if labelled else None)
            ids = [str(row) for row in range(1, len(texts) + 1)]
        targets = torch.arange(len(texts))  # unlabelled: each document's position (interface.py)
        if labelled:
            try:
                targets = task.encode_labels(labels)
            except UnknownLabel as err:
                raise DataError(f"{root}: document {ids[err.index]}: {err}") from None
        encode = self.vocabulary.encode
        return ids, Split.from_ids([encode(text, self.max_length) for text in texts], targets)

    def serving(self) -> dict:
        """read()'s encoding and Batches' padding as JSON values, for a serving system to give
        the model the ids validation gave it."""
        # A batch's length is its longest document's, at most max_length tokens.
        length = "length" if self.max_length > 1 else 1
        return {
            "input": {
                "name": "ids",
                "dtype": "int64",
                "shape": ["batch", length],
                "max": {"length": self.max_length},
            },
            "preprocessing": {
                "decode": "UTF-8 (a byte-order mark is dropped)",
                "lowercase": True,  # Python's str.lower(), before tokenizing
                "token_pattern": TOKEN.pattern,  # Python re.findall: the tokens, in order
                "vocabulary": list(self.vocabulary.words),  # a token's id is its place here
                "unknown_id": UNK,  # a token the vocabulary lacks
                "pad_id": PAD,  # fills a batch's shorter documents at the end; masked out
                "max_length": self.max_length,  # tokens after the first max_length are cut
                "empty_document": [UNK],  # the ids of a document without tokens
            },
        }

    def example(self) -> torch.Tensor:
        """Two documents of unknown words, as long as a batch may vary from (up to 2 ids)."""
        return torch.full((2, min(2, self.max_length)), UNK, dtype=torch.int64)


def _text_files(root: Path, required: bool = True) -> list[Path]:
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


def _read_labelled_folder(root: Path) -> tuple[list[str], list[str], list[str]]:
    """Texts, class names and ids (paths inside root) of the .txt files in root/<class>/."""
    texts: list[str] = []
    labels: list[str] = []
    ids: list[str] = []
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as err:
        raise DataError(f"cannot read {root}: {err.strerror}") from None
    for folder in folders:
        for path in _text_files(folder, required=False):  # a class may have no documents
            texts.append(_read_text(path))
            labels.append(folder.name)
            ids.append(path.relative_to(root).as_posix())
    if not texts:
        raise DataError(f"{root} has no class folders with .txt files; put each class's in one")
    return texts, labels, ids


# ---------------------------------------------------------------------------------------------
# Batches


class Batches(ResumableOrder):
    """Mini-batches of (token ids, targets), each padded with <pad> to its longest document.

    Training batches are drawn from the batcher's own seeded generator: a random order, then,
    within each window of bucket_batches batches, documents of similar length side by side, and
    the batches shuffled again; so a checkpoint that saves the generator resumes exactly.
    Validation batches go in order of length, which pads the least and changes no metric.
    """

    def __init__(
        self, split: Split, batch_size: int, *, shuffle: bool, seed: int = 0, device=None
    ) -> None:
        self.device = torch.device(device or "cpu")
        self.tokens = split.tokens.to(self.device)  # all ids move to the device once
        self.starts = split.starts.to(self.device)
        self.lengths = split.lengths  # stay on the CPU: the batch order is drawn there
        self.targets = split.targets.to(self.device)
        self.bucket_batches = split.bucket_batches if shuffle else 1
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)

    def batch_indices(self) -> list[torch.Tensor]:
        """The document indices of each batch of one epoch (drawn now, for a training epoch)."""
        if not self.shuffle:
            return list(torch.argsort(self.lengths, stable=True).split(self.batch_size))
        order = torch.randperm(len(self.lengths), generator=self.generator)
        if self.bucket_batches == 1:
            return self.unused(list(order.split(self.batch_size)))  # C5: a resumed epoch goes on
        batches = []
        for window in order.split(self.batch_size * self.bucket_batches):
            by_length = window[torch.argsort(self.lengths[window], stable=True)]
            batches += by_length.split(self.batch_size)
        shuffled = torch.randperm(len(batches), generator=self.generator)
        return self.unused([batches[i] for i in shuffled.tolist()])  # C5: a resumed epoch goes on

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in self.batch_indices():
            lengths = self.lengths[index]
            positions = torch.arange(int(lengths.max()))  # up to this batch's longest document
            real = (positions < lengths.unsqueeze(1)).to(self.device)
            index = index.to(self.device)
            where = self.starts[index].unsqueeze(1) + positions.to(self.device)
            ids = torch.where(real, self.tokens[where.clamp_max(len(self.tokens) - 1)], PAD)
            yield ids, self.targets[index]
