"""Categorical and missing cells: encoded from the training rows only, the same for new files."""

import csv
import dataclasses
import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from pyarrow import parquet

from classification_full import predict
from classification_full.data import (
    MISSING_CELLS,
    DataError,
    NewData,
    load_data,
)
from classification_full.encoding import (
    MISSING,
    UNKNOWN,
)
from classification_full.model import (
    ONE_HOT_MAX,
    build_model,
    embedding_dim,
)
from classification_full.train import fit

COLORS = ["red", "green", "blue", "cyan", "teal"]


def mixed_table(seed: int, rows: int) -> dict[str, list]:
    """A table as real files have them: a row number, a numeric column with missing cells, a
    text column (with missing cells and a value seen once), shop codes where "01" and "1"
    differ, and a target that depends on the colour."""
    rng = random.Random(seed)
    colors = [rng.choice(COLORS[: rng.randint(2, 5)]) for _ in range(rows)]
    colors[rng.randrange(rows)] = "violet"  # once: in training or validation, by the split
    for i in rng.sample(range(rows), rows // 10):
        colors[i] = None
    values = [round(rng.gauss(3, 2), 3) if rng.random() > 0.15 else None for _ in range(rows)]
    effect = {color: i for i, color in enumerate([*COLORS, "violet", None])}
    target = ["warm" if effect[c] % 2 else "cold" for c in colors]
    shop = [rng.choice(["01", "1", "7"]) for _ in range(rows)]
    return {
        "row": list(range(rows)),
        "value": values,
        "color": colors,
        "shop": shop,
        "target": target,
    }


def write_csv(path: Path, columns: dict, missing: str = "") -> str:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in zip(*columns.values(), strict=True):
            writer.writerow([missing if cell is None else cell for cell in row])
    return str(path)


def write_parquet(path: Path, columns: dict) -> str:
    parquet.write_table(pa.table(columns), path)
    return str(path)


def original_rows(data, split) -> list[int]:
    """Each sample's row in the file, from its standardised "row" column."""
    row = split.features[:, 0] * data.encoding.std[0] + data.encoding.mean[0]
    return row.round().long().tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_categories_and_missing_numbers_are_learned_from_the_training_rows(cfg, tmp_path, seed):
    columns = mixed_table(seed, 300)
    path = write_csv(tmp_path / "t.csv", columns, missing=["", "NA", " ? "][seed])
    data = load_data(dataclasses.replace(cfg, data=path, categorical="shop", seed=seed))
    # Numbers first (header order), then the missing-indicator column, then categories.
    assert data.feature_names == ["row", "value", "color", "shop"]
    train_rows = original_rows(data, data.train)
    kept = data.encoding.categories
    # The vocabulary: training values only, most frequent first (ties by text).
    seen = [columns["color"][r] for r in train_rows if columns["color"][r] is not None]
    assert kept["color"] == sorted(set(seen), key=lambda c: (-seen.count(c), c))
    assert ("violet" in kept["color"]) == (columns["color"].index("violet") in train_rows)
    assert sorted(kept["shop"]) == ["01", "1", "7"]  # codes stay text: "01" is not "1"
    assert data.input_shape == (3, 2 + len(kept["color"]), 5)
    # Training statistics of "value": its mean over the training rows' present cells.
    present = [columns["value"][r] for r in train_rows if columns["value"][r] is not None]
    assert data.encoding.mean[1].item() == pytest.approx(sum(present) / len(present), rel=1e-5)
    assert data.encoding.flagged == ["value"]
    for split in (data.train, data.val):
        for x, r in zip(split.features.tolist(), original_rows(data, split), strict=True):
            value, color = columns["value"][r], columns["color"][r]
            assert x[2] == (value is None)  # the indicator column
            if value is None:
                assert x[1] == 0.0  # the training mean, standardised
            else:
                std = data.encoding.std[1].item()
                assert x[1] == pytest.approx((value - data.encoding.mean[1].item()) / std, abs=1e-5)
            if color is None:
                assert x[3] == MISSING
            elif color in kept["color"]:
                assert x[3] == 2 + kept["color"].index(color)
            else:
                assert x[3] == UNKNOWN  # seen only in validation
            assert x[4] == 2 + kept["shop"].index(columns["shop"][r])


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_missing_refuse_refuses_every_missing_word_in_numbers_wherever_it_is(cfg, tmp_path, seed):
    # Each word that means "missing", with spaces or not, anywhere in a column of numbers: the
    # column stays numeric and the cell is refused by its place, in training and in a new file;
    # a text cell anywhere in the same column makes it categorical, with the word its missing
    # category.
    rng = random.Random(seed)
    for number, word in enumerate([*MISSING_CELLS, " NA ", " ?"]):
        columns = mixed_table(seed, 40)
        columns["value"] = [round(rng.gauss(0, 1), 3) for _ in range(40)]
        rows = sorted(rng.sample(range(40), rng.randint(1, 3)))
        for row in rows:
            columns["value"][row] = word
        path = write_csv(tmp_path / f"t{number}.csv", columns)
        refuse = dataclasses.replace(cfg, data=path, missing="refuse")
        with pytest.raises(DataError) as err:
            load_data(refuse)
        problem = "is empty" if not word.strip() else f"is missing ({word.strip()!r})"
        assert str(err.value) == (
            f"{path}:{rows[0] + 2}:2: column 'value' {problem}; every feature needs a number, "
            'or set missing = "impute" to fill it in'
        ), word
        text = rng.choice([i for i in range(40) if i not in rows])
        columns["value"][text] = "high"  # text: the column is categorical, the word missing
        data = load_data(dataclasses.replace(refuse, data=write_csv(tmp_path / "c.csv", columns)))
        assert "value" in data.encoding.categories and data.encoding.flagged == [], word
    # A new file under the checkpoint's refuse policy: refused by its place too.
    columns = mixed_table(seed, 40)
    columns["value"] = [1.0] * 40
    data = load_data(dataclasses.replace(refuse, data=write_csv(tmp_path / "train.csv", columns)))
    columns["value"][3] = "NA"
    new = write_csv(tmp_path / "new.csv", columns)
    with pytest.raises(DataError, match=r":5:2: column 'value' is missing \('NA'\)"):
        NewData(data.state_dict(), refuse).read(new, data.task, labelled=False)


@pytest.mark.probe
@pytest.mark.parametrize("seed", [3, 4])
def test_a_parquet_file_gives_what_the_same_table_gives_as_csv(cfg, tmp_path, seed):
    columns = mixed_table(seed, 200)
    runs = [
        load_data(dataclasses.replace(cfg, data=path, categorical="shop", seed=seed))
        for path in (
            write_csv(tmp_path / "t.csv", columns),
            write_parquet(tmp_path / "t.pq", columns),
        )
    ]
    assert runs[0].encoding.state_dict() == runs[1].encoding.state_dict()
    for a, b in [(runs[0].train, runs[1].train), (runs[0].val, runs[1].val)]:
        assert torch.equal(a.features, b.features) and torch.equal(a.targets, b.targets)


@pytest.mark.probe
def test_every_missing_word_is_missing_in_numbers_and_categories(cfg, tmp_path):
    words = [*MISSING_CELLS, " NA ", '" "']
    lines = [f"{i},{i % 3},c{i % 2},{i % 2}" for i in range(20)]
    lines += [f"{20 + i},{w},{w},{i % 2}" for i, w in enumerate(words)]
    path = tmp_path / "t.csv"
    path.write_text("row,value,color,target\n" + "\n".join(lines) + "\n")
    data = load_data(dataclasses.replace(cfg, data=str(path), val_fraction=0.1))
    assert data.encoding.categories["color"] in (["c0", "c1"], ["c1", "c0"])
    features = torch.cat([data.train.features, data.val.features])
    rows = features[:, 0] * data.encoding.std[0] + data.encoding.mean[0]
    late = features[rows.round() >= 20]
    assert len(late) == len(words)
    assert late[:, 2].tolist() == [1.0] * len(words)  # every one flagged missing
    assert late[:, 3].tolist() == [MISSING] * len(words)


@pytest.mark.probe
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_missing_refuse_names_the_cell_and_keeps_missing_categories(cfg, tmp_path, suffix):
    columns = mixed_table(5, 50)
    columns["value"] = [1.5] * 7 + [None] + [2.5] * 42
    write = write_csv if suffix == ".csv" else write_parquet
    path = write(tmp_path / f"t{suffix}", columns)
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path, missing="refuse"))
    place = f"{path}:9:2" if suffix == ".csv" else f"{path}: row 8"
    assert str(err.value).startswith(f"{place}: column 'value' is empty; every feature needs")
    columns["value"] = [1.5] * 50  # no missing numbers: the missing colours are a category
    path = write(tmp_path / f"u{suffix}", columns)
    data = load_data(dataclasses.replace(cfg, data=path, missing="refuse"))
    # shop's codes are numbers in the CSV file, text in the Parquet file (its type says so).
    numbers = 3 if suffix == ".csv" else 2
    assert data.encoding.flagged == [] and data.input_shape[0] == numbers
    color = data.feature_names.index("color")  # no indicator columns before it
    colors = data.train.features[:, color].tolist() + data.val.features[:, color].tolist()
    assert MISSING in colors


@pytest.mark.probe
@pytest.mark.parametrize("cell", ["", "NA"])
def test_a_missing_target_is_refused_with_its_row(cfg, tmp_path, cell):
    columns = mixed_table(6, 40)
    path = write_csv(tmp_path / "t.csv", columns)
    lines = Path(path).read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + "," + cell
    Path(path).write_text("\n".join(lines) + "\n")
    if cell and "classification" == "classification":
        load_data(dataclasses.replace(cfg, data=path))  # "NA" may be a class's name
        return
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path))
    assert str(err.value).startswith(f"{path}:6:5: target 'target' ")


@pytest.mark.probe
def test_an_identifier_column_is_refused_and_drop_leaves_it_out(cfg, tmp_path):
    columns = mixed_table(7, 100)
    columns["name"] = [f"customer {i}" for i in range(100)]
    path = write_csv(tmp_path / "t.csv", columns)
    with pytest.raises(DataError) as err:
        load_data(dataclasses.replace(cfg, data=path, max_categories=10))
    assert str(err.value) == (
        f"{path}: column 'name' has 80 different values in 80 training rows: an identifier, "
        'not a category; drop it (drop = "name") or raise max_categories'
    )
    data = load_data(dataclasses.replace(cfg, data=path, drop="name, row"))
    assert data.feature_names == ["value", "shop", "color"]  # numbers first
    with pytest.raises(DataError, match="no column 'nmae', which the categorical or drop"):
        load_data(dataclasses.replace(cfg, data=path, drop="nmae"))


@pytest.mark.probe
@pytest.mark.parametrize("seed", [8, 9])
def test_max_categories_keeps_the_most_frequent_values(cfg, tmp_path, seed):
    rng = random.Random(seed)
    codes = [f"k{min(int(rng.expovariate(0.3)), 30)}" for _ in range(400)]
    columns = {"code": codes, "target": [i % 2 for i in range(400)]}
    data = load_data(
        dataclasses.replace(cfg, data=write_csv(tmp_path / "t.csv", columns), max_categories=4)
    )
    kept = data.encoding.categories["code"]
    assert len(kept) == 4
    train_codes = data.train.features[:, 0]
    counts = [(train_codes == 2 + i).sum().item() for i in range(4)]
    assert counts == sorted(counts, reverse=True)
    unknown = (train_codes == UNKNOWN).sum().item()
    assert unknown == len(data.train) - sum(counts) > 0  # the rarer values share the unknown one


@pytest.mark.probe
@pytest.mark.parametrize(
    "encoding, learned",
    [("auto", [False, True]), ("onehot", [False, False]), ("embedding", [True, True])],
)
def test_the_model_reads_categories_one_hot_or_as_learned_vectors(cfg, encoding, learned):
    small, large = ONE_HOT_MAX, ONE_HOT_MAX + 1
    model = build_model(
        dataclasses.replace(cfg, categorical_encoding=encoding), (3, small, large), 2
    )
    sizes = [n.num_embeddings for n in model.inputs.embeddings]
    assert sizes == [n for n, yes in zip([small, large], learned, strict=True) if yes]
    width = 3 + sum(
        embedding_dim(n) if yes else n for n, yes in zip([small, large], learned, strict=True)
    )
    assert model.net[0].in_features == width
    x = torch.tensor([[0.5, -1.0, 2.0, 0, 1], [0.0, 0.0, 0.0, small - 1, large - 1]])
    assert model(x).shape == (2, 2)
    one_hot = model.inputs(x)[:, 3 : 3 + small] if not learned[0] else None
    if one_hot is not None:
        assert one_hot[0].tolist() == [1.0] + [0.0] * (small - 1)


@pytest.mark.probe
@pytest.mark.parametrize("seed", [10, 11])
def test_a_target_carried_by_a_category_is_learned_and_new_files_get_the_same_encoding(
    cfg, tmp_path, seed
):
    columns = mixed_table(seed, 600)
    path = write_csv(tmp_path / "t.csv", columns)
    run = dataclasses.replace(cfg, data=path, categorical="shop", epochs=15, seed=seed, lr=1e-2)
    result = fit(run)
    last = result["history"][-1]
    assert last["val_accuracy"] > 0.9, last  # the colour decides the class
    # A new file: columns in another order, an unseen colour, missing cells of each kind.
    new = {
        "shop": ["7", "01", "99", "1"],
        "color": ["red", "ultraviolet", None, "blue"],
        "value": [None, 3.0, 1.0, None],
        "row": [0, 1, 2, 3],
    }
    data = result["data"]
    reader = NewData(data.state_dict(), run)
    _, split = reader.read(
        write_csv(tmp_path / "new.csv", new, missing="NA"), data.task, labelled=False
    )
    kept = data.encoding.categories
    code = {c: 2 + kept["color"].index(c) if c in kept["color"] else UNKNOWN for c in COLORS}
    assert split.features[:, 3].tolist() == [code["red"], UNKNOWN, MISSING, code["blue"]]
    assert split.features[:, 4].tolist() == [
        2 + kept["shop"].index("7"),
        2 + kept["shop"].index("01"),
        UNKNOWN,
        2 + kept["shop"].index("1"),
    ]
    assert split.features[:, 2].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert split.features[0, 1].item() == split.features[3, 1].item() == 0.0
    # The command-line predictor, from the checkpoint alone: the same rows from Parquet.
    predictor = predict.load_predictor(f"{run.out}/best.pt", device=cfg.device)
    from_csv = predictor.predict(str(tmp_path / "new.csv"))
    from_parquet = predictor.predict(write_parquet(tmp_path / "new.parquet", new))
    assert from_csv == from_parquet and len(from_csv) == 4
