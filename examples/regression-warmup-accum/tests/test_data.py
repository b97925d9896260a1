"""Reading CSV and Parquet files: the target by name, numeric features, one line per bad input."""

import csv
import dataclasses
import io
import os
import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from pyarrow import parquet

from regression_warmup_accum import tables, train
from regression_warmup_accum.data import (
    DataError,
    NewData,
    load_data,
    read_table,
)


def write_csv(path: Path, content: str | bytes) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def read(path: str, target: str = "target", **settings) -> tuple:
    """read_table's features, targets and feature column names (numeric, then categorical)."""
    table = read_table(path, target, **settings)
    columns = table.columns()
    return table.features, table.targets, columns.numeric + columns.categorical


def load_csv(cfg, path: Path, content: str | bytes):
    return load_data(dataclasses.replace(cfg, data=write_csv(path, content)))


def write_parquet(path: Path, columns: dict) -> str:
    parquet.write_table(pa.table(columns), path)
    return str(path)


def random_table(seed: int, rows: int) -> dict[str, list]:
    """Columns of float32 values (as Python floats, so a CSV file holds them exactly), small
    integers, and a target; each seed draws other values."""
    rng = random.Random(seed)
    f32 = torch.tensor([rng.gauss(0, 10 ** rng.randint(-3, 6)) for _ in range(2 * rows)])
    columns = {"wide": f32[:rows].tolist(), "count": [rng.randint(-5, 500) for _ in range(rows)]}
    columns["narrow"] = f32[rows:].tolist()
    columns["target"] = [round(rng.uniform(-1e6, 1e6), 3) for _ in range(rows)]
    return columns


def csv_copy(path: Path, columns: dict) -> str:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(zip(*columns.values(), strict=True))
    return str(path)


@pytest.fixture(params=["one piece", "pieces of 64 bytes"])
def pieces(request, monkeypatch):
    """A CSV file read as one piece by one thread, or cut in pieces of about 64 bytes read by 3
    threads: every step of the parallel reading, on a small file."""
    one = request.param == "one piece"
    monkeypatch.setattr(tables, "PIECE_BYTES", 1 << 30 if one else 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if one else 3)
    yield request.param
    torch.set_num_threads(threads)


def messy_csv(seed: int, rows: int, quotes: bool) -> str:
    """A CSV file with what real ones have: missing cells, blank lines, a category first seen
    near the end, \r\n line breaks for odd seeds; with quotes, quoted commas, quotes and line
    breaks (and then a quoted header)."""
    rng = random.Random(seed)
    lines = ['"num"," city ",note,target' if quotes else "num, city ,note,target"]
    for i in range(rows):
        num = rng.choice(["", "NA", "?", f"{rng.gauss(0, 100):.6g}", str(rng.randint(-9, 9))])
        cities = ["Oslo", "Rio", " Rome", "", "N/A"] + (["Lima"] if i > rows * 0.8 else [])
        notes = ["plain", "two words", "x"]
        targets = ["cat", "dog", "big cat"]
        if quotes:
            cities.append('"Rio, RJ"')
            notes += ['"two\nlines"', '"a ""quoted"" word"', '"' + "line\n" * 30 + '"']
            targets.append('"big, cat"')
        target = f"{rng.uniform(-5, 5):.4f}"
        lines.append(f"{num},{rng.choice(cities)},{rng.choice(notes)},{target}")
        if rng.random() < 0.05:
            lines.append("")  # no row
    end = "\r\n" if seed % 2 else "\n"
    return end.join(lines) + ("" if seed % 3 == 0 else end)


NUMBER = "every feature needs a number"
NOT_FINITE = "not a finite float32 number (at most 3.4e38); fix or drop the row"
NAMES = "every column needs its own name"
FIELD_LIMIT = (
    "a field is longer than the csv module's limit of 131072 characters; "
    "check for a quote that is never closed"
)
LONG_LINE = "line longer than 1048576 characters; is this a CSV file with one row per line?"
NOT_UTF8 = "is not UTF-8; save the file as UTF-8"
EMPTY = "needs a header row and at least one data row"
HEADER = "with the column names"
LABEL = "every row needs a label"
REFUSED = ', or set missing = "impute" to fill it in'
MISSED = NUMBER + REFUSED


def test_csv_target_column_by_name(cfg, tmp_path):
    rows = "\n".join(f"{i},{i % 3 * 0.5},{i * 0.1}" for i in range(20))
    path = write_csv(tmp_path / "d.csv", "a,b,label\n" + rows + "\n")
    data = load_data(dataclasses.replace(cfg, data=path, target=" label "))
    assert data.feature_names == ["a", "b"]
    assert len(data.train) + len(data.val) == 20
    assert len(data.val) == 4


@pytest.mark.probe
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_values_are_read_exactly_with_or_without_a_bom(tmp_path, bom):
    text = ' x1 , x 2 ,target\r\n0.1,-2.5e3,1\r\n\r\n3,1e-3,0\r\n1.5,"7",1\r\n'
    path = write_csv(tmp_path / "d.csv", bom + text.encode())
    features, targets, names = read(path)
    assert names == ["x1", "x 2"]  # names lose surrounding spaces only
    expected = torch.tensor([[0.1, -2500.0], [3.0, 1e-3], [1.5, 7.0]], dtype=torch.float32)
    assert torch.equal(features, expected)
    assert list(targets) == [1.0, 0.0, 1.0]


@pytest.mark.probe
def test_a_record_may_span_lines_and_errors_name_the_line_it_starts_on(tmp_path):
    path = write_csv(tmp_path / "d.csv", 'a,b,target\n"1\n",2,0\n3,4,1\n')
    assert read(path)[0].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    path = write_csv(tmp_path / "e.csv", 'a,b,target\n"1\n",2,0\n3,inf,1\n')
    with pytest.raises(DataError) as err:
        read(path)
    assert str(err.value) == f"{path}:4:2: column 'b' is 'inf', {NOT_FINITE}"


@pytest.mark.probe
@pytest.mark.parametrize(
    "content, message",
    [
        ("a,b\n1,2\n", "{path}: no column 'target' (columns: a, b)"),
        ("target\n1\n0\n", "{path}: no feature columns besides 'target'"),
        ("a,target\n1,0\n2\n", "{path}:3: 1 fields, the header has 2"),
        ("a,target\n", "{path}: " + EMPTY),
        ("", "{path} is empty; it " + EMPTY),
        ("\na,target\n1,0\n", "{path}:1: the first line must be the header row " + HEADER),
        # Header: duplicates (a second target column would leak the label), empty names.
        ("a,b,c,target,target\n1,2,3,0,0\n", "{path}:1: duplicate column names: target; " + NAMES),
        ("a, b,b ,a,target\n1,2,3,4,0\n", "{path}:1: duplicate column names: a, b; " + NAMES),
        ("a,,target\n1,2,0\n", "{path}:1: column 2 has no name; name every column"),
        ("a,target,\n1,0,\n", "{path}:1: column 3 has no name; name every column"),
        # Feature cells: file:line:column, the column named (missing cells refused here).
        ("a,b,target\n1,,0\n", "{path}:2:2: column 'b' is empty; " + NUMBER + REFUSED),
        ("a,b,target\n1, ,0\n", "{path}:2:2: column 'b' is empty; " + NUMBER + REFUSED),
        # nan and NaN are missing words: refused as missing cells, as NA is
        ("a,b,target\n1,2,0\n3,nan,1\n", "{path}:3:2: column 'b' is missing ('nan'); " + MISSED),
        ("a,b,target\n1,2,0\n3,NaN,1\n", "{path}:3:2: column 'b' is missing ('NaN'); " + MISSED),
        ("a,b,target\ninf,2,0\n", "{path}:2:1: column 'a' is 'inf', " + NOT_FINITE),
        ("a,b,target\n1,-Infinity,0\n", "{path}:2:2: column 'b' is '-Infinity', " + NOT_FINITE),
        ("a,b,target\n1,1e39,0\n", "{path}:2:2: column 'b' is '1e39', " + NOT_FINITE),
        ("a,b,target\n1,-4e38,0\n", "{path}:2:2: column 'b' is '-4e38', " + NOT_FINITE),
        # Encoding and size: bounded reads, and the line named.
        (b"a,target\n1,0\n2\xe9,1\n", "{path}:3:2: byte 0xe9 " + NOT_UTF8),
        (b"\xff\xfea\x00,\x00t\x00\n\x00", "{path}:1:1: byte 0xff " + NOT_UTF8),  # UTF-16
        ("a,target\n" + "1" * 200_000 + ",0\n", "{path}:2: " + FIELD_LIMIT),
        ('a,target\n1,0\n"2,1\n' + "3,1\n" * 40_000, "{path}:3: " + FIELD_LIMIT),
        ("a,target\n" + "1," * 600_000 + "\n", "{path}:2: " + LONG_LINE),
        (b"\0" * (3 << 20), "{path}:1: " + LONG_LINE),
        # The target, on the line it is missing from.
        (
            "a,target\n1,0\n2,\n",
            "{path}:3:2: target 'target' is empty; every row needs a target value",
        ),
        (
            "a,target\n1,0\n2,x\n",
            "{path}:3:2: target 'target' is not a number: 'x'; a regression target is numeric",
        ),
        (
            "a,target\n1,0\n2,nan\n",
            "{path}:3:2: target 'target' is not a finite number: 'nan'; "
            "fill in a value or drop the row",
        ),
        (
            "a,target\n1,0\n2,-inf\n",
            "{path}:3:2: target 'target' is not a finite number: '-inf'; "
            "fill in a value or drop the row",
        ),
        (
            "a,target\n1,0\n2,1e39\n",
            "{path}:3:2: target 'target' is too large for float32 (at most 3.4e38): '1e39'; "
            "rescale it",
        ),
    ],
)
def test_bad_csv_is_a_one_line_error(cfg, tmp_path, pieces, content, message):
    path = write_csv(tmp_path / "d.csv", content)
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path, missing="refuse"))
    assert str(err.value) == message.format(path=path)


@pytest.mark.probe
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes and /dev/zero are POSIX")
def test_a_path_that_is_no_csv_file_is_a_one_line_error(cfg, tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)  # reading would block until a writer comes, perhaps never
    cases = {
        str(tmp_path): f"{tmp_path} is a folder; data must be a CSV or Parquet file",
        str(tmp_path / "no.csv"): f"cannot read {tmp_path / 'no.csv'}: No such file or directory",
        str(tmp_path / "no.pq"): f"cannot read {tmp_path / 'no.pq'}: No such file or directory",
        str(fifo): f"{fifo} is not a regular file (a device or pipe); save it to a CSV file",
        # Endless: read whole, it would fill the memory.
        "/dev/zero": "/dev/zero is not a regular file (a device or pipe); save it to a CSV file",
    }
    for path, message in cases.items():
        with pytest.raises(DataError) as err:
            load_data(dataclasses.replace(cfg, data=path))
        assert str(err.value) == message


@pytest.mark.probe
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_unreadable_file_is_a_one_line_error(cfg, tmp_path, monkeypatch, suffix):
    write = write_parquet if suffix == ".parquet" else csv_copy
    path = write(tmp_path / f"d{suffix}", {"a": [1, 2], "target": [0, 1]})
    os.chmod(path, 0)
    if os.name != "posix" or os.geteuid() == 0:
        # Root (as in many containers) reads any file: refuse it the way the OS would a user.
        def denied(file, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(file))

        monkeypatch.setattr(tables, "open", denied, raising=False)
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path))
    assert str(err.value) == f"cannot read {path}: Permission denied"


@pytest.mark.probe
def test_cells_only_python_reads_are_read_and_far_errors_name_their_line(tmp_path):
    # Arrow refuses '1_000' and ' 2\n' (Python's float() reads them): the csv module reads it.
    path = write_csv(tmp_path / "d.csv", 'a,b,target\n1_000,"2\n",0\n3,4,1\n')
    assert read(path)[0].tolist() == [[1000.0, 2.0], [3.0, 4.0]]
    # Lone \r line breaks (old Mac files): more rows than \n, read by the csv module too.
    path = write_csv(tmp_path / "cr.csv", "a,b,target\r1,2,0\r3,4,1\r5,6,0\r")
    assert read(path)[0].tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    # Past Arrow's first block of 1 MiB, a bad cell is still named by its line.
    rows = "".join(f"{i},{i % 7},{i % 2}\n" for i in range(150_000))
    path = write_csv(tmp_path / "big.csv", f"a,b,target\n{rows}\n7,inf,1\n")
    with pytest.raises(DataError) as err:
        read(path)
    assert str(err.value) == f"{path}:150003:2: column 'b' is 'inf', {NOT_FINITE}"
    # And text there makes the column categorical: every earlier number is a category too.
    path = write_csv(tmp_path / "big.csv", f"a,b,target\n{rows}\n7,seven,1\n")
    features, _, names = read(path)
    assert names == ["a", "b"] and features.shape == (150_001, 2)
    assert features[:8, 1].tolist() == [0, 1, 2, 3, 4, 5, 6, 0]  # numbered as they come
    assert features[-1].tolist() == [7, 7]  # 'seven', the eighth value


@pytest.mark.probe
@pytest.mark.parametrize("quotes", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_file_read_in_pieces_by_threads_is_read_as_one_piece(tmp_path, monkeypatch, seed, quotes):
    text = messy_csv(seed, 400, quotes)
    path = write_csv(tmp_path / "d.csv", text)
    monkeypatch.setattr(tables, "_read_rows", None)  # Arrow alone reads it
    monkeypatch.setattr(tables, "PIECE_BYTES", 1 << 30)
    whole = read_table(path, "target")
    monkeypatch.setattr(tables, "PIECE_BYTES", 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        # Quotes in the rows: one piece, as only a parse from the start finds their ends.
        count = len(tables._pieces(path))
        assert count == 1 if quotes else count > 50, count
        cut = read_table(path, "target")
    finally:
        torch.set_num_threads(threads)
    assert cut.columns().numeric == ["num"] and cut.columns().categorical == ["city", "note"]
    assert whole.features.shape[0] == len(whole.targets) > 380  # blank lines are no rows
    assert torch.equal(cut.features.isnan(), whole.features.isnan())
    assert torch.equal(cut.features.nan_to_num(), whole.features.nan_to_num())
    assert cut.values == whole.values and list(cut.targets) == list(whole.targets)
    # The same numbers as one reading: categories in the order they first appear.
    rows = list(csv.reader(io.StringIO(text, newline="")))
    first_seen = dict.fromkeys(row[1].strip() for row in rows[1:] if row)
    assert cut.values[0] == [city for city in first_seen if city not in ("", "N/A")]


@pytest.mark.probe
@pytest.mark.parametrize("piece_bytes", [1, 7, 64])
def test_pieces_cover_every_row_once(tmp_path, monkeypatch, piece_bytes):
    monkeypatch.setattr(tables, "PIECE_BYTES", piece_bytes)
    rng = random.Random(piece_bytes)
    header = '"a","b\n2",target\n'
    for rows in ["", "1,2,3", "1,2,3\n", '1,"x\n\ny",3\n4,5,6', '1,"unclosed,3\n4,5,6\n']:
        for extra in ["", "7,8,9\n" * rng.randint(1, 30)]:
            text = header + extra + rows
            path = tmp_path / "d.csv"
            path.write_bytes(text.encode())
            pieces = tables._pieces(path)
            start = len(header)
            for offset, size, lines in pieces:  # one after another, to the end
                assert offset == start and size > 0
                piece = text[offset : offset + size]
                assert lines == piece.count("\n") + (not piece.endswith("\n"))
                start += size
            assert start == len(text)
            if '"' in rows:
                assert len(pieces) == 1


@pytest.mark.probe
def test_a_quote_inside_a_cell_does_not_cut_a_quoted_line_break(tmp_path, pieces):
    # 5'11" is text (its quote starts no quoted cell): after it, an even count of quotes
    # comes before the line break inside "multi ... line". Cut there, the row would be split.
    rows = "".join(f"{i},x,{i % 2}\n" for i in range(20))
    text = f"a,note,target\n{rows}1,5'11\",0\n" + "".join(
        f'{i},"multi\n{i}\nline",{i % 2}\n' for i in range(30)
    )
    features, targets, names = read(write_csv(tmp_path / "d.csv", text))
    assert names == ["a", "note"] and features.shape == (51, 2) and len(targets) == 51
    assert features[20].tolist() == [1.0, 1.0]  # the second note value: 5'11"
    assert features[21:, 1].tolist() == list(range(2, 32))  # one value per multi-line note


@pytest.mark.probe
def test_a_bad_cell_in_a_later_piece_is_named_by_its_line(tmp_path, pieces):
    rows = "".join(f"{i},{i % 7},{i % 2}\n" for i in range(2000))
    path = write_csv(tmp_path / "d.csv", f"a,b,target\n{rows}7,inf,1\n3,4,0\n")
    with pytest.raises(DataError) as err:
        read(path)
    assert str(err.value) == f"{path}:2002:2: column 'b' is 'inf', {NOT_FINITE}"
    # Text there makes the column categorical, numbered from the first row on.
    path = write_csv(tmp_path / "e.csv", f"a,b,target\n{rows}7,seven,1\n3,4,0\n")
    features, _, names = read(path)
    assert names == ["a", "b"] and features.shape == (2002, 2)
    assert features[:8, 1].tolist() == [0, 1, 2, 3, 4, 5, 6, 0]
    assert features[-2:].tolist() == [[7, 7], [3, 4]]  # 'seven' is the eighth value


@pytest.mark.probe
def test_arrow_alone_reads_text_columns_wherever_they_are(tmp_path, monkeypatch):
    def no_csv_module(*args):
        raise AssertionError("read by the csv module, not by Arrow")

    monkeypatch.setattr(tables, "_read_rows", no_csv_module)
    path = write_csv(tmp_path / "d.csv", "target,note,a,city\n0,x,1.5,Oslo\n1,,2.5,Rome\n")
    features, _, names = read(path)
    assert names == ["a", "note", "city"]  # numbers first, then categories in file order
    assert features[:, 0].tolist() == [1.5, 2.5]
    assert features[0, 1] == 0 and features[1, 1].isnan()  # an empty note: missing
    assert features[:, 2].tolist() == [0.0, 1.0]  # categories numbered as they come


@pytest.mark.probe
def test_a_file_too_large_for_memory_is_a_one_line_error(tmp_path, monkeypatch):
    path = csv_copy(tmp_path / "d.csv", {"a": [1, 2], "target": [0, 1]})

    def no_memory(*args, **kwargs):
        raise pa.ArrowMemoryError("malloc of size 1000000000000 failed")

    monkeypatch.setattr(tables.arrow_csv, "open_csv", no_memory)
    with pytest.raises(DataError) as err:
        read(path)
    assert str(err.value) == f"{path} does not fit in memory; train on a sample of its rows"


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
            "{path}: row 2: target 'target' is empty; every row needs a target value",
        ),
        (
            {"a": [1.0, 2.0], "target": ["1.5", "high"]},
            "{path}: row 2: target 'target' is not a number: 'high'; "
            "a regression target is numeric",
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


@pytest.mark.probe
@pytest.mark.parametrize(
    "content, message",
    [
        ("a,b,c,target,target\n1,2,3,0,0\n", "{path}:1: duplicate column names: target; " + NAMES),
        ("a,b,target\n1,2,0\n3,inf,1\n", "{path}:3:2: column 'b' is 'inf', " + NOT_FINITE),
        (b"a,target\n1,0\n\xe92,1\n", "{path}:3:1: byte 0xe9 " + NOT_UTF8),
        ('a,target\n"1,0\n' + "3,1\n" * 40_000, "{path}:2: " + FIELD_LIMIT),
    ],
)
def test_the_command_line_prints_one_line_and_exits_2(cfg, tmp_path, capsys, content, message):
    path = write_csv(tmp_path / "d.csv", content)
    argv = ["--data", path, "--out", str(tmp_path / "run"), "--device", cfg.device]
    assert train.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message.format(path=path)}\n"
    assert not (tmp_path / "run" / "last.pt").exists()
