"""Documents: CSV files and folders, bad input, the vocabulary, padded and bucketed batches."""

import dataclasses
import os
import random
from pathlib import Path

import pytest
import torch

from text_classification_ema import train
from text_classification_ema.data import (
    Batches,
    DataError,
    NewData,
    Split,
    load_data,
)
from text_classification_ema.model import build_model
from text_classification_ema.synthetic import make_documents
from text_classification_ema.tokens import (
    PAD,
    UNK,
    Vocabulary,
    tokenize,
)


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


def small(cfg, **changes):
    return dataclasses.replace(cfg, min_freq=1, val_fraction=0.25, **changes)


# ---------------------------------------------------------------------------------------------
# CSV files


@pytest.mark.probe
def test_a_csv_file_gives_texts_and_labels_and_ignores_other_columns(cfg, tmp_path):
    rows = ["id,review,stars,note"]
    rows += [f'{i},"great film, {i} times ""wow""",{i % 2 + 1},x' for i in range(6)]
    rows += ['7,"a review\nover two lines",1.0,y', "8,,2,z"]  # 1.0 is class 1; an empty text
    path = write(tmp_path / "reviews.csv", "\n".join(rows) + "\n")
    data = load_data(small(cfg, data=str(path), text_column="review", target="stars"))
    assert data.task.classes == ["1", "2"]
    assert len(data.train) + len(data.val) == 8
    words = data.vocabulary.words
    assert {"great", "film", ",", "wow", '"'} <= set(words) and "x" not in words


@pytest.mark.probe
@pytest.mark.parametrize(
    "content, message",
    [
        ("", "{path} is empty; it needs a header row and one row per document"),
        ("text\nhello\n", "{path}: no column 'target' (columns: text)"),
        ("text,target,text\na,1,b\n", "{path}:1: column 'text' appears twice; name it once"),
        ("text,target\nhello,1\nbye\n", "{path}:3: 1 fields, the header has 2"),
        (
            "text,target\nhello,1\nbye, \n",
            "{path}:3:2: label 'target' is empty; every document needs a label",
        ),
        (
            "text,target\nhello,nan\n",
            "{path}:2:2: label 'target' is not a finite number: 'nan'; "
            "give every document a real label",
        ),
        ("text,target\n", "{path}: no documents; it needs a header row and one row per document"),
        (
            "text,target\na,1\nb,1.0\n",
            "{path}: the labels name 1 class; classification needs 2 or more",
        ),
    ],
    ids=[
        "empty",
        "no-target",
        "twice",
        "short-row",
        "empty-label",
        "nan-label",
        "no-rows",
        "one-class",
    ],
)
def test_bad_csv_files_are_one_line_naming_the_place(cfg, tmp_path, content, message):
    path = write(tmp_path / "docs.csv", content)
    with pytest.raises(DataError) as caught:
        load_data(small(cfg, data=str(path)))
    assert str(caught.value) == message.format(path=path)


@pytest.mark.probe
def test_continuous_labels_are_refused(cfg, tmp_path):
    rows = ["text,target"] + [f"doc {i},{i / 7:.4f}" for i in range(40)]
    path = write(tmp_path / "docs.csv", "\n".join(rows))
    with pytest.raises(DataError, match="they look continuous"):
        load_data(small(cfg, data=str(path)))


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_too_many_whole_number_labels_are_refused_and_the_data_is_summed_up(
    cfg, tmp_path, capsys, seed
):
    # Whole-number labels pass as classes while there are at most max(20, rows / 5) of them:
    # at the bound and one past it, for row counts on both sides of 100. What passes is summed
    # up in one line: documents, split, classes and vocabulary.
    rng = random.Random(seed)
    for rows in (rng.randint(30, 99), rng.randint(101, 600)):
        limit = max(20, rows // 5)
        start = rng.randint(-5, 300)
        for distinct in (limit, limit + 1):
            lines = [f"doc {i} w{i % 7},{start + i % distinct}" for i in range(rows)]
            path = write(tmp_path / f"d{rows}-{distinct}.csv", "\n".join(["text,target", *lines]))
            settings = small(cfg, data=str(path))
            if distinct <= limit:
                data = load_data(settings)
                n_val = round(rows * settings.val_fraction)
                assert capsys.readouterr().out == (
                    f"data: {rows} documents of {path} ({rows - n_val} training, {n_val} "
                    f"validation); {distinct} classes; vocabulary of {len(data.vocabulary)} "
                    f"words (the training documents' words seen {settings.min_freq}+ times, "
                    f"at most {settings.vocab_size}, with <pad> and <unk>)\n"
                )
                continue
            with pytest.raises(DataError) as err:
                load_data(settings)
            assert str(err.value).startswith(
                f"{path}: the labels have {distinct} distinct whole numbers in {rows} rows "
                f"({rows / distinct:.1f} rows a class): too few to learn each as a class"
            )


@pytest.mark.probe
def test_text_that_is_not_utf8_names_file_line_and_column(cfg, tmp_path):
    path = write(tmp_path / "docs.csv", "text,target\nnaïve,1\ncafé,2\n", encoding="latin-1")
    with pytest.raises(DataError) as caught:
        load_data(small(cfg, data=str(path)))
    assert str(caught.value) == f"{path}:2:3: byte 0xef is not UTF-8; save it as UTF-8"


@pytest.mark.probe
def test_a_device_is_refused_instead_of_read_forever(cfg):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    with pytest.raises(DataError, match="is not a regular file"):
        load_data(small(cfg, data="/dev/zero"))


# ---------------------------------------------------------------------------------------------
# Folders of text files


def make_folder(root: Path, per_class: int = 4) -> Path:
    for name in ("spam", "ham"):
        for i in range(per_class):
            write(root / name / f"{i}.txt", f"{name} message number {i}\nsecond line")
    return root


@pytest.mark.probe
def test_a_folder_gives_one_class_per_sub_folder(cfg, tmp_path):
    root = make_folder(tmp_path / "texts")
    write(root / "ham" / "notes.md", "not a document")  # other suffixes are left out
    data = load_data(small(cfg, data=str(root)))
    assert data.task.classes == ["ham", "spam"]
    assert len(data.train) + len(data.val) == 8


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_training_reads_every_document_below_a_class_folder_as_evaluate_does(cfg, tmp_path, seed):
    # Documents at random depths below each class folder, and hidden files and folders, which
    # nothing reads; training must count what evaluate counts, class by class.
    generator = torch.Generator().manual_seed(seed)
    root, expected = tmp_path / "texts", {"ham": 0, "spam": 0}
    for n in range(40):
        name = ("ham", "spam")[n % 2]
        depth = int(torch.randint(0, 4, (1,), generator=generator))
        folder = root / name / Path(*[f"level{d}" for d in range(depth)])
        write(folder / f"{n}.txt", f"{name} message {n}")
        expected[name] += 1
    write(root / "ham" / ".hidden.txt", "spam spam spam")
    write(root / "spam" / ".cache" / "old.txt", "ham ham ham")
    data = load_data(small(cfg, data=str(root), seed=seed))
    read = torch.cat([data.train.targets, data.val.targets]).bincount(minlength=2).tolist()
    assert dict(zip(data.task.classes, read, strict=True)) == expected
    inputs = NewData(data.state_dict(), small(cfg))
    _, labelled = inputs.read(str(root), data.task, labelled=True)
    assert labelled.targets.bincount(minlength=2).tolist() == read


@pytest.mark.probe
def test_train_and_val_folders_are_the_split(cfg, tmp_path):
    make_folder(tmp_path / "texts" / "train", per_class=3)
    make_folder(tmp_path / "texts" / "val", per_class=1)
    data = load_data(small(cfg, data=str(tmp_path / "texts")))
    assert (len(data.train), len(data.val)) == (6, 2)


@pytest.mark.probe
@pytest.mark.parametrize(
    "layout, message",
    [
        (
            lambda r: r.mkdir(),
            "{root} has no class folders; put each class's .txt files in its own",
        ),
        (
            lambda r: (r / "a").mkdir(parents=True),
            "{root}/a holds no .txt files; every class needs documents",
        ),
        (
            lambda r: make_folder(r / "train"),
            "{root} has a train/ folder but no val/ folder; a split needs both",
        ),
        (
            lambda r: write(r / "a" / "x.txt", "caf\xe9", encoding="latin-1"),
            "{root}/a/x.txt:1:4: byte 0xe9 is not UTF-8; save it as UTF-8",
        ),
    ],
    ids=["no-classes", "empty-class", "train-only", "not-utf8"],
)
def test_bad_folders_are_one_line_naming_the_place(cfg, tmp_path, layout, message):
    root = tmp_path / "texts"
    layout(root)
    with pytest.raises(DataError) as caught:
        load_data(small(cfg, data=str(root)))
    assert str(caught.value) == message.format(root=root)


@pytest.mark.probe
def test_the_command_line_reads_a_csv_file_and_prints_bad_input_as_one_line(tmp_path, capsys):
    rows = ["body,label"] + [
        f"{'good fine' if i % 2 else 'bad poor'} text {i},{i % 2}" for i in range(40)
    ]
    path = write(tmp_path / "docs.csv", "\n".join(rows))
    argv = ["--data", str(path), "--text-column", "body", "--target", "label", "--epochs", "2"]
    argv += ["--device", "cpu", "--out", str(tmp_path / "run")]
    assert train.main(argv) == 0
    assert (tmp_path / "run" / "last.pt").exists()
    capsys.readouterr()
    bad = write(tmp_path / "bad.csv", "body,label\nhello,\n")
    argv = [
        "--data",
        str(bad),
        "--text-column",
        "body",
        "--target",
        "label",
        "--out",
        str(tmp_path / "r2"),
    ]
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"error: {bad}:2:2: label 'label' is empty; every document needs a label\n"


# ---------------------------------------------------------------------------------------------
# The vocabulary


def test_T1_the_vocabulary_comes_from_the_training_documents_only(cfg, tmp_path):
    # Every document has a word of its own: a vocabulary that saw validation documents knows
    # some of theirs.
    rows = ["text,target"] + [f"common word{i},{i % 2}" for i in range(40)]
    path = write(tmp_path / "docs.csv", "\n".join(rows))
    data = load_data(small(cfg, data=str(path)))
    known = set(data.vocabulary.words)
    train_ids = set(data.train.tokens.tolist())
    for doc in range(len(data.val)):
        start, length = int(data.val.starts[doc]), int(data.val.lengths[doc])
        own = data.val.tokens[start + 1 : start + length].tolist()  # after "common"
        assert own == [UNK], "T1: a word seen only in validation has an id of its own"
    assert len(known) == 2 + 1 + len(data.train)  # <pad>, <unk>, "common", one per document
    assert UNK not in train_ids


def test_the_vocabulary_keeps_the_most_frequent_words_in_a_fixed_order():
    texts = ["b a a c", "a b d", "c e"]
    vocabulary = Vocabulary.build(texts, max_size=5, min_freq=2)
    assert vocabulary.words == ["<pad>", "<unk>", "a", "b", "c"]  # d, e: seen once
    assert vocabulary.encode("A, b! zz", max_length=10) == [2, UNK, 3, UNK, UNK]
    assert vocabulary.encode("a b c", max_length=2) == [2, 3]
    assert vocabulary.encode("", max_length=5) == [UNK]  # every document has a token
    assert tokenize("Don't stop: ça va!") == ["don't", "stop", ":", "ça", "va", "!"]


# ---------------------------------------------------------------------------------------------
# Batches: padded to their own longest document, bucketed by length, repeatable


def split_of(lengths: list[int], bucket_batches: int = 1) -> Split:
    ids = [[2 + (i + j) % 5 for j in range(n)] for i, n in enumerate(lengths)]
    return Split.from_ids(ids, torch.arange(len(lengths)), bucket_batches)


def unpadded(ids: torch.Tensor) -> list[list[int]]:
    return [[t for t in row if t != PAD] for row in ids.tolist()]


def test_each_batch_is_padded_to_its_own_longest_document():
    lengths = [3, 9, 1, 4, 2, 7, 5]
    split = split_of(lengths)
    seen = []
    for ids, targets in Batches(split, 3, shuffle=True, seed=1):
        assert ids.shape[1] == max(lengths[t] for t in targets.tolist())
        for row, target in zip(unpadded(ids), targets.tolist(), strict=True):
            start = int(split.starts[target])
            assert row == split.tokens[start : start + lengths[target]].tolist()
        seen += targets.tolist()
    assert sorted(seen) == list(range(len(lengths)))  # every document once


def test_bucketing_pads_less_and_keeps_every_document_once():
    lengths = torch.randint(1, 200, (2000,), generator=torch.Generator().manual_seed(0)).tolist()

    def padding(bucket_batches: int) -> float:
        batches = Batches(split_of(lengths, bucket_batches), 32, shuffle=True, seed=3)
        padded = real = 0
        seen = []
        for ids, targets in batches:
            padded += ids.numel()
            real += int((ids != PAD).sum())
            seen += targets.tolist()
        assert sorted(seen) == list(range(len(lengths)))
        return 1 - real / padded

    assert padding(50) < 0.1 < 0.3 < padding(1)


def test_batch_order_follows_the_seed_and_resumes_from_the_generator_state():
    split = split_of(list(range(1, 40)), bucket_batches=4)
    first = Batches(split, 4, shuffle=True, seed=5)
    epoch1 = [t.tolist() for _, t in first]
    state = first.generator.get_state()
    epoch2 = [t.tolist() for _, t in first]
    again = Batches(split, 4, shuffle=True, seed=5)
    assert [t.tolist() for _, t in again] == epoch1
    again.generator.set_state(state)
    assert [t.tolist() for _, t in again] == epoch2
    assert [t.tolist() for _, t in Batches(split, 4, shuffle=True, seed=6)] != epoch1


def test_validation_batches_go_in_order_of_length_and_hold_every_document():
    lengths = [5, 2, 8, 2, 1]
    batches = Batches(split_of(lengths, bucket_batches=4), 2, shuffle=False)
    order = [t for _, targets in batches for t in targets.tolist()]
    assert order == [4, 1, 3, 0, 2]


# ---------------------------------------------------------------------------------------------
# Padding changes nothing the model computes (T2, T3)


def test_T3_outputs_do_not_depend_on_how_far_a_batch_is_padded(cfg):
    data = load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim).eval()
    ids, _ = next(iter(Batches(data.val, 16, shuffle=False)))
    # Also the same documents cut to their first 1, 2 and 3 tokens: padded far, most of their
    # positions see padding only, so a pooling that lets padding in changes some output
    # whatever the weights are, even in a small model.
    with torch.no_grad():
        for batch in (ids, ids[:, :1], ids[:, :2], ids[:, :3]):
            extra = torch.cat([batch, torch.full((len(batch), 37), PAD)], dim=1)
            assert torch.allclose(model(batch), model(extra), atol=1e-5, rtol=1e-5), (
                "T3: padding a batch further changed its outputs"
            )
        for row in range(len(ids)):  # each document alone, with no padding at all
            alone = ids[row : row + 1, : int((ids[row] != PAD).sum())]
            assert torch.allclose(model(alone), model(ids)[row : row + 1], atol=1e-5, rtol=1e-5), (
                "T2: a document's outputs in a padded batch differ from its outputs alone"
            )


def test_T2_the_loss_of_a_padded_batch_is_the_mean_of_each_documents_own_loss(cfg):
    data = load_data(cfg)
    ids, targets = next(iter(Batches(data.train, 16, shuffle=True, seed=2)))
    # Training batches are bucketed by length, so they hold little padding and a loss that
    # counts it moves by less than rounding. Cut all documents but the first to 1-3 tokens:
    # most positions are then padding, and such a loss differs whatever the weights are.
    for row in range(1, len(ids)):
        ids[row, 1 + row % 3 :] = PAD
    for seed in range(3):  # several initialisations, none of them chosen to pass
        torch.manual_seed(seed)
        model = build_model(cfg, data.input_shape, data.task.output_dim).eval()
        with torch.no_grad():
            batch_loss = data.task.loss(model(ids), targets)
            own = [
                data.task.loss(
                    model(ids[i : i + 1, : int((ids[i] != PAD).sum())]), targets[i : i + 1]
                )
                for i in range(len(ids))
            ]
        assert batch_loss.item() == pytest.approx(torch.stack(own).mean().item(), rel=1e-5), (
            "T2: padding counts in the loss"
        )


# ---------------------------------------------------------------------------------------------
# The synthetic documents


def test_synthetic_documents_follow_the_seed_and_need_word_order():
    docs, labels = make_documents(400, seed=3)
    assert (docs, labels) == make_documents(400, seed=3)
    assert make_documents(400, seed=4)[0] != docs
    assert sorted(set(labels)) == [0, 1, 2, 3]
    # Without a class keyword, the same bag of words can carry opposite labels: order decides.
    bags = {}
    for doc, label in zip(docs, labels, strict=True):
        if not any(word.startswith("topic") for word in doc.split()):
            bags.setdefault(
                tuple(
                    sorted(w for w in doc.split() if w in {"not", "alpha", "beta", "good", "bad"})
                ),
                set(),
            ).add(label)
    assert any(len(seen) > 1 for seen in bags.values())
