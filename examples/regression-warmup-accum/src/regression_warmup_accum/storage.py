"""Where a table lives while it trains: in memory, or memory-mapped from disk when it is large."""

import tempfile
from pathlib import Path

import numpy as np
import torch

MB = 2**20


class Storage:
    """Makes float32 matrices: in memory up to the budget, beyond it in a memory-mapped file.

    The file is created in `folder` and unlinked at once: the operating system keeps it while
    the run maps it and frees the disk space when the run ends, however it ends. Its pages are
    read from disk as batches need them, so memory holds what the page cache keeps, not the
    whole table.
    """

    def __init__(self, budget_mb: int, folder: str | Path) -> None:
        self.budget = budget_mb * MB
        self.folder = Path(folder)
        self.on_disk = False
        self.largest = 0  # bytes of the largest matrix made

    def matrix(self, rows: int, width: int) -> np.ndarray:
        """An uninitialised float32 matrix of rows x width."""
        size = rows * width * 4
        self.largest = max(self.largest, size)
        if size <= self.budget or size == 0:
            return torch.empty(rows, width).numpy()
        self.on_disk = True
        self.folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=self.folder, prefix=".table.", suffix=".f32") as f:
            # The mapping keeps the file; closing it here only closes the descriptor.
            return np.memmap(f, dtype=np.float32, mode="w+", shape=(rows, width))

    def describe(self) -> str:
        size = f"{self.largest / MB:.0f} MB"
        if not self.on_disk:
            return f"in memory ({size}; memory_budget_mb {self.budget // MB})"
        return (
            f"memory-mapped from a file in {self.folder} ({size}, over memory_budget_mb "
            f"{self.budget // MB}); batches are read from it"
        )


class Rows:
    """Some rows of a matrix that may live on disk, read when indexed (batches of a split).

    Split and Batches use it as they use a tensor of those rows already in memory: len, shape,
    indexing by a tensor of positions or by a slice, and .to(device) for the batches' device.
    """

    def __init__(self, matrix: torch.Tensor, rows: torch.Tensor, device=None) -> None:
        self.matrix = matrix  # on the CPU, backed by memory or by a mapped file
        self.rows = rows  # int64, positions in matrix
        self.device = torch.device(device or "cpu")

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.rows), self.matrix.shape[1])

    def to(self, device) -> "Rows":
        return Rows(self.matrix, self.rows, device)

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, torch.Tensor):
            index = index.cpu()
        return self.matrix[self.rows[index]].to(self.device)
