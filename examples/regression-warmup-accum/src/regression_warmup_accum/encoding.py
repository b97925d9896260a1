"""Feature encoding: missing numbers filled in and flagged, categories numbered, standardising."""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

# Every categorical column has these two category numbers; its values seen in training follow.
UNKNOWN = 0  # a value training never saw (or one beyond max_categories)
MISSING = 1  # an empty cell, or one of the missing-value words data.py reads
SPECIAL = ("(unknown)", "(missing)")

# A categorical column with a different value in more than this share of the training rows is
# an identifier (a name, an id): a category per row teaches nothing that carries to new rows.
IDENTIFIER_SHARE = 0.5
CHUNK_ROWS = 1 << 16  # rows encoded at a time: a few MB, whatever the table's size


@dataclass
class Columns:
    """A file's feature columns as read: numbers first (nan: missing), then categories.

    A categorical column holds each cell's category number in the file (nan: missing), an
    index into its list of values in `values`.
    """

    numeric: list[str]
    categorical: list[str]
    features: torch.Tensor  # float32, (rows, len(numeric) + len(categorical))
    values: list[list[str]]  # per categorical column, its values, in any order


@dataclass
class Encoding:
    """How a table's columns become the model's inputs; fitted on the training rows only.

    The model's input row is: the numeric columns standardised (a missing cell is the training
    mean, 0 once standardised), then one 0/1 column per numeric column that had missing cells
    in training, then one category number per categorical column (UNKNOWN, MISSING or 2 + the
    value's place in `categories`).
    """

    numeric: list[str]
    mean: torch.Tensor  # of each numeric column over the training rows, missing cells left out
    std: torch.Tensor
    flagged: list[str]  # numeric columns that get a missing-indicator column
    categories: dict[str, list[str]]  # per categorical column, its values kept, most frequent first
    impute: bool  # False: a missing numeric cell is refused (training and new files alike)

    @classmethod
    def fit(
        cls, columns: Columns, rows: torch.Tensor, max_categories: int, impute: bool
    ) -> "Encoding":
        """The encoding of `columns` learned from `rows` (the training split) alone."""
        x, k = columns.features, len(columns.numeric)
        # A chunk of rows at a time, in file order: a table on disk is never copied whole, and
        # is read in order. Two passes over the numbers: their mean, then the spread around it.
        rows = rows.sort().values
        count = torch.zeros(k, dtype=torch.float64)
        total = torch.zeros(k, dtype=torch.float64)
        for part in _chunks(x, rows, slice(0, k)):
            present = ~part.isnan()
            count += present.sum(dim=0)
            total += torch.where(present, part, 0.0).sum(dim=0)
        mean = total / count.clamp(min=1)  # a column missing throughout: 0
        squares = torch.zeros(k, dtype=torch.float64)
        for part in _chunks(x, rows, slice(0, k)):
            squares += torch.where(part.isnan(), 0.0, part - mean).square().sum(dim=0)
        std = (squares / (count - 1).clamp(min=1)).sqrt()
        std = torch.where(std > 0, std, 1.0)  # constant columns stay as they are
        gaps = (count < len(rows)).tolist()
        flagged = [name for name, gap in zip(columns.numeric, gaps, strict=True) if gap]
        categories = {}
        for j, name in enumerate(columns.categorical):
            counts = torch.zeros(len(columns.values[j]), dtype=torch.int64)
            for part in _chunks(x, rows, k + j):
                seen = part[~part.isnan()].long()
                counts += torch.bincount(seen, minlength=len(counts))
            categories[name] = _vocabulary(
                counts.tolist(), columns.values[j], name, len(rows), max_categories
            )
        return cls(columns.numeric, mean.float(), std.float(), flagged, categories, impute)

    @property
    def names(self) -> list[str]:
        """The columns a file must have for this encoding: numeric, then categorical."""
        return self.numeric + list(self.categories)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The number of numeric inputs, then each categorical column's number of categories."""
        sizes = [len(SPECIAL) + len(values) for values in self.categories.values()]
        return (len(self.numeric) + len(self.flagged), *sizes)

    def describe(self) -> str:
        """The columns in a few words, e.g. "3 numeric columns, 1 categorical (5 values kept)"."""
        text = f"{len(self.numeric)} numeric column{'s' * (len(self.numeric) != 1)}"
        if self.flagged:
            text += f" ({len(self.flagged)} with missing cells: filled in and flagged)"
        if self.categories:
            kept = ", ".join(str(len(values)) for values in self.categories.values())
            text += f", {len(self.categories)} categorical ({kept} values kept)"
        return text

    def apply(self, columns: Columns, matrix=None) -> torch.Tensor:
        """The model's inputs for `columns`, read with these names.

        They replace columns.features in place, or, with missing-indicator columns to add, fill
        a new matrix made by matrix(rows, width) (default: in memory).
        """
        x, k = columns.features, len(self.numeric)
        flagged = [self.numeric.index(name) for name in self.flagged]
        lookups = [
            _lookup(values, kept)
            for values, kept in zip(columns.values, self.categories.values(), strict=True)
        ]
        out = x
        if flagged:
            width = x.shape[1] + len(flagged)
            out = torch.from_numpy(matrix(len(x), width)) if matrix else torch.empty(len(x), width)
        for start in range(0, len(x), CHUNK_ROWS):
            part = x[start : start + CHUNK_ROWS]
            numbers = part[:, :k]
            indicators = numbers[:, flagged].isnan()
            numbers = torch.where(numbers.isnan(), self.mean, numbers)
            codes = [_category_numbers(part[:, k + j], lookup) for j, lookup in enumerate(lookups)]
            target = out[start : start + CHUNK_ROWS]  # part itself when nothing is added
            target[:, :k] = (numbers - self.mean) / self.std
            target[:, k : k + len(flagged)] = indicators
            for j, column in enumerate(codes):
                target[:, k + len(flagged) + j] = column
        return out

    def state_dict(self) -> dict:
        """Plain lists, for checkpoints that load with weights_only (C3)."""
        return {
            "flagged": list(self.flagged),
            "categories": dict(self.categories),
            "impute": self.impute,
        }

    @classmethod
    def from_state(cls, state: dict) -> "Encoding":
        """The encoding in a checkpoint's "data" (saved before there were encodings: numbers).

        Each entry is checked before use, so an edited checkpoint is refused (ValueError) rather
        than broadcast or misread: a mean shorter than the columns would predict from garbage.
        """
        saved = state.get("encoding", {"flagged": [], "categories": {}, "impute": False})
        _require(isinstance(saved, dict), "'encoding' is not a dict")
        categories, names = saved.get("categories"), state.get("feature_names")
        _require(
            isinstance(categories, dict)
            and all(_strings(values) for values in categories.values()),
            "'categories' is not a dict of each categorical column's values (text)",
        )
        _require(_strings(names), "'feature_names' is not a list of column names")
        _require(len(set(names)) == len(names), "'feature_names' names a column twice")
        _require(set(categories) <= set(names), "'categories' names columns that are not features")
        numeric = [name for name in names if name not in categories]
        flagged = saved.get("flagged")
        _require(_strings(flagged) and set(flagged) <= set(numeric), "'flagged' is not numeric")
        _require(isinstance(saved.get("impute"), bool), "'impute' is not true or false")
        mean, std = state.get("feature_mean"), state.get("feature_std")
        for name, values in (("feature_mean", mean), ("feature_std", std)):
            _require(
                isinstance(values, torch.Tensor)
                and values.dtype == torch.float32
                and tuple(values.shape) == (len(numeric),)
                and bool(values.isfinite().all()),
                f"'{name}' is not {len(numeric)} finite float32 numbers, one per numeric column",
            )
        _require(bool((std > 0).all()), "'feature_std' has a value that is not above 0")
        return cls(numeric, mean, std, list(flagged), categories, saved["impute"])


def _require(condition: bool, problem: str) -> None:
    if not condition:
        raise ValueError(problem)


def _strings(values) -> bool:
    return isinstance(values, list) and all(isinstance(value, str) for value in values)


def _chunks(x: torch.Tensor, rows: torch.Tensor, columns) -> Iterator[torch.Tensor]:
    """x[rows, columns] a chunk of rows at a time, in float64."""
    for start in range(0, len(rows), CHUNK_ROWS):
        yield x[rows[start : start + CHUNK_ROWS]][:, columns].double()


def _vocabulary(
    counts: list[int], values: list[str], name: str, rows: int, max_categories: int
) -> list[str]:
    """The values of a categorical column kept for training, most frequent first."""
    distinct = sum(count > 0 for count in counts)
    if distinct > max_categories and distinct > IDENTIFIER_SHARE * rows:
        raise ValueError(
            f"column '{name}' has {distinct} different values in {rows} training rows: an "
            f'identifier, not a category; drop it (drop = "{name}") or raise max_categories'
        )
    # Most frequent first; ties in the order of the text, so the order is the same every run.
    seen_values = [i for i, count in enumerate(counts) if count]
    order = sorted(seen_values, key=lambda i: (-counts[i], values[i]))
    return [values[i] for i in order[:max_categories]]


def _lookup(values: list[str], kept: list[str]) -> torch.Tensor:
    """The model's category number of each of a file's values (by their number there), and
    after them the missing category, for nan."""
    place = {value: len(SPECIAL) + i for i, value in enumerate(kept)}
    return torch.tensor([place.get(value, UNKNOWN) for value in values] + [MISSING])


def _category_numbers(numbers: torch.Tensor, lookup: torch.Tensor) -> torch.Tensor:
    """A file's category numbers (nan: missing) as the model's category numbers."""
    index = torch.where(numbers.isnan(), len(lookup) - 1, numbers).long()
    return lookup[index].to(numbers.dtype)
