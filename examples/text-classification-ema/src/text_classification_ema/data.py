"""Data: built-in synthetic documents, a CSV file or a folder of text files; a seeded split; a
vocabulary from the training split; batches padded to their own longest document."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from . import interface
from .checkpoint import content_digest
from .documents import (
    TEXT_SUFFIXES,
    read_csv,
    read_folder,
    read_labelled_folder,
    read_text,
    text_files,
)
from .inputs import DataError
from .interface import UnknownLabel
from .seed import ResumableOrder
from .synthetic import CLASSES, make_documents
from .task import Task
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

    def read(self, path: str, task: interface.Task, labelled: bool) -> tuple[list[str], Split]:
        """A CSV file (ids: row numbers, 1 the first after the header), one .txt file, or a
        folder: of .txt files anywhere below it (ids: their paths inside it), or, labelled, of
        one folder of .txt files per class, named as in training."""
        root = Path(path)
        if root.is_dir():
            if labelled:
                texts, labels, ids = read_labelled_folder(root)
            else:
                files = text_files(root)
                texts, labels = [read_text(p) for p in files], []
                ids = [p.relative_to(root).as_posix() for p in files]
        elif root.suffix.lower() in TEXT_SUFFIXES:
            if labelled:
                raise DataError(
                    f"{root} is one document without a label; evaluate reads a CSV file with "
                    "the label column or a folder with one folder of .txt files per class"
                )
            texts, labels, ids = [read_text(root)], [], [root.name]
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
