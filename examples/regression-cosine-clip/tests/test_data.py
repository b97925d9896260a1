"""Reading a CSV file: the target column by name, numeric features, clear errors."""

import dataclasses

import pytest

from regression_cosine_clip.data import DataError, load_data


def write_csv(path, text: str):
    path.write_text(text)
    return str(path)


def test_csv_target_column_by_name(cfg, tmp_path):
    rows = "\n".join(f"{i},{i % 3 * 0.5},{i * 0.1}" for i in range(20))
    path = write_csv(tmp_path / "d.csv", "a,b,label\n" + rows + "\n")
    data = load_data(dataclasses.replace(cfg, data=path, target="label"))
    assert data.feature_names == ["a", "b"]
    assert len(data.train) + len(data.val) == 20
    assert len(data.val) == 4


@pytest.mark.parametrize(
    "text, message",
    [
        ("a,b\n1,2\n", "no column 'target' \\(columns: a, b\\)"),
        ("a,target\n1,0\nx,1\n", "d.csv:3: column 'a' is not a number: 'x'"),
        ("a,target\n1,0\n2\n", "d.csv:3: 1 fields, the header has 2"),
        ("a,target\n", "needs a header row and at least one data row"),
    ],
)
def test_bad_csv_is_a_clear_error(cfg, tmp_path, text, message):
    path = write_csv(tmp_path / "d.csv", text)
    with pytest.raises(DataError, match=message):
        load_data(dataclasses.replace(cfg, data=path))
