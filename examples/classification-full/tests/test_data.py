"""Reading CSV files: the target by name, exact values, labels, one line per bad input."""

import dataclasses
import os
import random
from pathlib import Path

import pytest
import torch

import table_files
from classification_full import (
    csv_records,
    parquet_files,
    train,
)
from classification_full.data import (
    DataError,
    load_data,
)

# What the table data test files share (tests/table_files.py).
write_csv = table_files.write_csv
read = table_files.read
write_parquet = table_files.write_parquet
csv_copy = table_files.csv_copy
pieces = table_files.pieces
NUMBER = table_files.NUMBER
NOT_FINITE = table_files.NOT_FINITE
NAMES = table_files.NAMES
FIELD_LIMIT = table_files.FIELD_LIMIT
LONG_LINE = table_files.LONG_LINE
NOT_UTF8 = table_files.NOT_UTF8
EMPTY = table_files.EMPTY
HEADER = table_files.HEADER
LABEL = table_files.LABEL
REFUSED = table_files.REFUSED
MISSED = table_files.MISSED


def load_csv(cfg, path: Path, content: str | bytes):
    return load_data(dataclasses.replace(cfg, data=write_csv(path, content)))


def test_csv_target_column_by_name(cfg, tmp_path):
    rows = "\n".join(f"{i},{i % 3 * 0.5},{'ab'[i % 2]}" for i in range(20))
    path = write_csv(tmp_path / "d.csv", "a,b,label\n" + rows + "\n")
    data = load_data(dataclasses.replace(cfg, data=path, target=" label "))
    assert data.feature_names == ["a", "b"]
    assert len(data.train) + len(data.val) == 20
    assert len(data.val) == 4
    assert data.task.classes == ["a", "b"]


@pytest.mark.probe
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_values_are_read_exactly_with_or_without_a_bom(tmp_path, bom):
    text = ' x1 , x 2 ,target\r\n0.1,-2.5e3,1\r\n\r\n3,1e-3,0\r\n1.5,"7",1\r\n'
    path = write_csv(tmp_path / "d.csv", bom + text.encode())
    features, targets, names = read(path)
    assert names == ["x1", "x 2"]  # names lose surrounding spaces only
    expected = torch.tensor([[0.1, -2500.0], [3.0, 1e-3], [1.5, 7.0]], dtype=torch.float32)
    assert torch.equal(features, expected)
    assert list(targets) == ["1", "0", "1"]


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
        ("a,target\n1,0\n2,\n", "{path}:3:2: target 'target' is empty; " + LABEL),
        ("a,target\n1,0\n2, \n", "{path}:3:2: target 'target' is empty; " + LABEL),
        (
            "a,target\n1,0\n2,nan\n",
            "{path}:3:2: target 'target' is not a finite number: 'nan'; "
            "give every row a real label",
        ),
        (
            "a,target\n1,0\n2,inf\n",
            "{path}:3:2: target 'target' is not a finite number: 'inf'; "
            "give every row a real label",
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

        for module in (csv_records, parquet_files):  # where CSV and Parquet files are opened first
            monkeypatch.setattr(module, "open", denied, raising=False)
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path))
    assert str(err.value) == f"cannot read {path}: Permission denied"


@pytest.mark.probe
def test_numerically_equal_labels_are_one_class(cfg, tmp_path):
    labels = ["1", "1.0", " 1 ", "1e0", "01", "0", "0.0", "-0", "+0.00"]
    rows = "".join(f"{i},{label}\n" for i, label in enumerate(labels * 3))
    data = load_csv(cfg, tmp_path / "d.csv", "a,target\n" + rows)
    assert data.task.classes == ["0", "1"]
    targets = torch.cat([data.train.targets, data.val.targets])
    assert sorted(targets.tolist()) == [0] * 12 + [1] * 15


def test_class_ids_and_text_labels_are_classes(cfg, tmp_path):
    rows = "".join(f"{i},{i % 100}\n" for i in range(500))  # 5 rows a class: enough
    data = load_csv(cfg, tmp_path / "ids.csv", "a,target\n" + rows)
    assert data.task.classes == [str(i) for i in range(100)]  # in numeric order
    rows = "".join(f"{i},{['cat', 'dog', '2', 'Dog'][i % 4]}\n" for i in range(40))
    data = load_csv(cfg, tmp_path / "text.csv", "a,target\n" + rows)
    assert data.task.classes == ["2", "Dog", "cat", "dog"]


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_target_of_too_many_whole_numbers_is_refused_and_the_classes_are_counted(
    cfg, tmp_path, capsys, seed
):
    # Whole numbers pass as classes while there are at most max(20, rows / 5) of them: at the
    # bound and one past it, for row counts on both sides of 100 (where rows / 5 passes 20),
    # with the values drawn from a seeded range (ages, counts, ids: any offset).
    rng = random.Random(seed)
    for rows in (rng.randint(30, 99), rng.randint(101, 2000)):
        limit = max(20, rows // 5)
        start = rng.randint(-50, 500)
        for distinct in (limit, limit + 1):
            values = [start + i % distinct for i in range(rows)]
            rng.shuffle(values)
            text = "a,target\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values))
            path = write_csv(tmp_path / f"d{rows}-{distinct}.csv", text)
            settings = dataclasses.replace(cfg, data=path)
            if distinct <= limit:
                assert len(load_data(settings).task.classes) == distinct
                assert f"; target: {distinct} classes\n" in capsys.readouterr().out
                continue
            with pytest.raises(DataError) as err:
                load_data(settings)
            assert str(err.value).startswith(
                f"{path}: the target has {distinct} distinct whole numbers in {rows} rows "
                f"({rows / distinct:.1f} rows a class): too few to learn each as a class "
                f"(at most {limit} classes, 5 rows each on average)"
            )


@pytest.mark.probe
@pytest.mark.parametrize(
    "rows, grades, refused",
    [(200, 20, False), (200, 21, True), (1000, 50, False), (1000, 51, True)],
)
def test_a_target_with_many_fractional_values_is_continuous(cfg, tmp_path, rows, grades, refused):
    # Fractional values pass while there are at most max(20, 5% of the rows) of them.
    values = [f"{(i % grades) + 0.5}" for i in range(rows)]
    text = "a,target\n" + "".join(f"{i},{value}\n" for i, value in enumerate(values))
    path = write_csv(tmp_path / "d.csv", text)
    if not refused:
        assert len(load_data(dataclasses.replace(cfg, data=path)).task.classes) == grades
        return
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path))
    assert str(err.value) == (
        f"{path}: the target has {grades} distinct numbers in {rows} rows, with fractions such as "
        f"0.5: it looks continuous (classes allow at most {grades - 1} such values); "
        "use a regression project (scaffold new NAME --task regression) or bin the values"
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
