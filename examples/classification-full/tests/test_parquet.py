"""Parquet files: the table the same CSV file gives, any column order, one line per bad input."""

import dataclasses
import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from pyarrow import parquet

import table_files
from classification_full.data import (
    DataError,
    NewData,
    load_data,
)

# What the table data test files share (tests/table_files.py).
write_csv = table_files.write_csv
read = table_files.read
write_parquet = table_files.write_parquet
csv_copy = table_files.csv_copy
NUMBER = table_files.NUMBER
NOT_FINITE = table_files.NOT_FINITE
NAMES = table_files.NAMES
LABEL = table_files.LABEL
REFUSED = table_files.REFUSED


def random_table(seed: int, rows: int) -> dict[str, list]:
    """Columns of float32 values (as Python floats, so a CSV file holds them exactly), small
    integers, and a target; each seed draws other values."""
    rng = random.Random(seed)
    f32 = torch.tensor([rng.gauss(0, 10 ** rng.randint(-3, 6)) for _ in range(2 * rows)])
    columns = {"wide": f32[:rows].tolist(), "count": [rng.randint(-5, 500) for _ in range(rows)]}
    columns["narrow"] = f32[rows:].tolist()
    columns["target"] = [rng.choice(["cat", "dog", "7"]) for _ in range(rows)]
    return columns


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_parquet_file_gives_what_the_same_table_gives_as_csv(cfg, tmp_path, seed):
    columns = random_table(seed, 300)
    from_csv = read(csv_copy(tmp_path / "t.csv", columns))
    from_parquet = read(write_parquet(tmp_path / "t.parquet", columns))
    assert from_csv[2] == from_parquet[2] == ["wide", "count", "narrow"]
    expected = torch.tensor([columns[name] for name in from_csv[2]]).T
    assert torch.equal(from_csv[0], expected)
    assert torch.equal(from_parquet[0], expected)
    assert list(from_csv[1]) == list(from_parquet[1])
    # And the runs made of them: the same split, statistics and encoded targets.
    runs = [
        load_data(dataclasses.replace(cfg, data=str(tmp_path / name)))
        for name in ("t.csv", "t.parquet")
    ]
    for a, b in [(runs[0].train, runs[1].train), (runs[0].val, runs[1].val)]:
        assert torch.equal(a.features, b.features) and torch.equal(a.targets, b.targets)


@pytest.mark.probe
@pytest.mark.parametrize("seed", [3, 4])
def test_new_data_may_be_parquet_with_its_columns_in_any_order(cfg, tmp_path, seed):
    columns = random_table(seed, 200)
    data = load_data(dataclasses.replace(cfg, data=csv_copy(tmp_path / "t.csv", columns)))
    new = NewData(data.state_dict(), cfg)
    reordered = {
        "note": ["any text"] * 200,
        **{n: columns[n] for n in ["narrow", "target", "count", "wide"]},
    }
    read = [
        new.read(write(tmp_path / f"new{suffix}", reordered), data.task, labelled=True)
        for write, suffix in [(csv_copy, ".csv"), (write_parquet, ".pq")]
    ]
    assert read[0][0] == read[1][0] == [str(i) for i in range(1, 201)]
    assert torch.equal(read[0][1].features, read[1][1].features)
    assert torch.equal(read[0][1].targets, read[1][1].targets)


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_number_no_float32_holds_is_refused_in_every_parquet_float_type(cfg, tmp_path, seed):
    # inf, -inf and (where missing cells are refused) nan, in a float16, float32 or float64
    # column, or beyond float32 in a float64 one: refused by row and column, in training and in
    # a new file, never read as a number the model then trains or predicts on.
    rng = random.Random(seed)
    cases = [(kind, bad) for kind in ("float16", "float32", "float64") for bad in ("inf", "-inf")]
    cases += [
        ("float64", "1e39"),
        ("float64", "-4e38"),
        (rng.choice(["float16", "float32"]), "nan"),
    ]
    good = {
        "a": [round(rng.gauss(0, 1), 2) for _ in range(60)],
        "target": [i % 2 for i in range(60)],
    }
    inputs = NewData(
        load_data(
            dataclasses.replace(cfg, data=write_parquet(tmp_path / "g.pq", good), missing="refuse")
        ).state_dict(),
        cfg,
    )
    for number, (kind, bad) in enumerate(cases):
        row = rng.randrange(60)
        values = list(good["a"])
        values[row] = float(bad)
        columns = {
            "b": [1.0] * 60,
            "a": pa.array(values, pa.float32() if kind == "float32" else pa.float64()).cast(kind),
            "target": good["target"],
        }
        path = write_parquet(tmp_path / f"d{number}.parquet", columns)
        shown = repr(pa.scalar(float(bad)).cast(kind).as_py())
        message = f"{path}: row {row + 1}: column 'a' is {shown}, " + NOT_FINITE
        with pytest.raises(DataError) as err:
            load_data(dataclasses.replace(cfg, data=path, missing="refuse"))
        assert str(err.value) == message, (kind, bad)
        with pytest.raises(DataError) as err:
            inputs.read(path, None, labelled=False)
        assert str(err.value) == message, (kind, bad)


@pytest.mark.probe
def test_a_pandas_index_in_a_parquet_file_is_no_feature(tmp_path):
    table = pa.table({"a": [1.0, 2.0], "row_id": [10, 11], "target": [0, 1]})
    table = table.replace_schema_metadata({"pandas": '{"index_columns": ["row_id"]}'})
    parquet.write_table(table, tmp_path / "d.parquet")
    assert read(str(tmp_path / "d.parquet"))[2] == ["a"]


@pytest.mark.probe
@pytest.mark.parametrize(
    "columns, message",
    [
        (
            {"a": [1.0, 2.0], "day": pa.array([1, 2], pa.date32()), "target": [0, 1]},
            "{path}: column 'day' holds date32[day] values, neither numbers nor text; "
            'convert it, or drop it (drop = "day")',
        ),
        (
            {"a": [1.0, None], "target": [0, 1]},
            "{path}: row 2: column 'a' is empty; " + NUMBER + REFUSED,
        ),
        (
            {"a": [1.0, float("nan")], "target": [0, 1]},
            "{path}: row 2: column 'a' is nan, " + NOT_FINITE,
        ),
        ({"a": [1e39, 1.0], "target": [0, 1]}, "{path}: row 1: column 'a' is 1e+39, " + NOT_FINITE),
        ({"a": [1.0, 2.0]}, "{path}: no column 'target' (columns: a)"),
        (
            {"a": pa.array([], pa.float64()), "target": pa.array([], pa.int64())},
            "{path}: needs at least one row",
        ),
        (
            pa.Table.from_arrays(
                [pa.array([1]), pa.array([2]), pa.array([0])], ["a", "a", "target"]
            ),
            "{path}: duplicate column names: a; " + NAMES,
        ),
        (
            {"a": [1.0, 2.0, 3.0], "target": [0, None, 1]},
            "{path}: row 2: target 'target' is empty; " + LABEL,
        ),
    ],
)
def test_bad_parquet_is_a_one_line_error(cfg, tmp_path, columns, message):
    path = tmp_path / "d.parquet"
    parquet.write_table(columns if isinstance(columns, pa.Table) else pa.table(columns), path)
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=str(path), missing="refuse"))
    assert str(err.value) == message.format(path=path)


@pytest.mark.probe
def test_a_file_that_is_no_parquet_or_a_damaged_one_is_a_one_line_error(cfg, tmp_path):
    good = Path(write_parquet(tmp_path / "good.parquet", {"a": [1.5] * 100, "target": [0, 1] * 50}))
    damaged = bytearray(good.read_bytes())
    damaged[4:200] = b"\xff" * 196  # the column data; the footer is intact
    for content in [b"a,target\n1,0\n2,1\n", bytes(damaged)]:
        path = write_csv(tmp_path / "d.parquet", content)
        with pytest.raises(DataError) as err:
            load_data(dataclasses.replace(cfg, data=path))
        assert str(err.value).startswith(f"{path}: not a readable Parquet file (")
        assert str(err.value).endswith(
            "); write it again (pandas: df.to_parquet), or name a CSV file .csv"
        )
