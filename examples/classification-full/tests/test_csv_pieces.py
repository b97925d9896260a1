"""A CSV file read in pieces by threads: the rows one piece gives, errors named by line."""

import csv
import io
import random

import pyarrow as pa
import pytest
import torch

import table_files
from classification_full import (
    csv_arrow,
    tables,
)
from classification_full.data import (
    DataError,
    read_table,
)

# What the table data test files share (tests/table_files.py).
write_csv = table_files.write_csv
read = table_files.read
csv_copy = table_files.csv_copy
pieces = table_files.pieces
NOT_FINITE = table_files.NOT_FINITE


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
        target = rng.choice(targets)
        lines.append(f"{num},{rng.choice(cities)},{rng.choice(notes)},{target}")
        if rng.random() < 0.05:
            lines.append("")  # no row
    end = "\r\n" if seed % 2 else "\n"
    return end.join(lines) + ("" if seed % 3 == 0 else end)


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
    monkeypatch.setattr(tables, "read_rows", None)  # Arrow alone reads it
    monkeypatch.setattr(csv_arrow, "PIECE_BYTES", 1 << 30)
    whole = read_table(path, "target")
    monkeypatch.setattr(csv_arrow, "PIECE_BYTES", 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        # Quotes in the rows: one piece, as only a parse from the start finds their ends.
        count = len(csv_arrow.cut_in_pieces(path))
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
    monkeypatch.setattr(csv_arrow, "PIECE_BYTES", piece_bytes)
    rng = random.Random(piece_bytes)
    header = '"a","b\n2",target\n'
    for rows in ["", "1,2,3", "1,2,3\n", '1,"x\n\ny",3\n4,5,6', '1,"unclosed,3\n4,5,6\n']:
        for extra in ["", "7,8,9\n" * rng.randint(1, 30)]:
            text = header + extra + rows
            path = tmp_path / "d.csv"
            path.write_bytes(text.encode())
            pieces = csv_arrow.cut_in_pieces(path)
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

    monkeypatch.setattr(tables, "read_rows", no_csv_module)
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

    monkeypatch.setattr(csv_arrow.arrow_csv, "open_csv", no_memory)
    with pytest.raises(DataError) as err:
        read(path)
    assert str(err.value) == f"{path} does not fit in memory; train on a sample of its rows"
