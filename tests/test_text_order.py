"""On the built-in synthetic documents, where classes hang on word order, a generated text
project's CNN beats a bag-of-words linear model trained on the same encoded split."""

import csv
import importlib

import pytest

from scaffold.options import Options
from tests.conftest import PYTHON, project_env, render, run

np = pytest.importorskip("numpy")
LogisticRegression = pytest.importorskip("sklearn.linear_model").LogisticRegression
threadpool_limits = pytest.importorskip("threadpoolctl").threadpool_limits

# The proof tier: minutes of training, kept out of the everyday run.
pytestmark = [pytest.mark.slow, pytest.mark.proof]

EPOCHS = 10


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return render(
        tmp_path_factory.mktemp("render") / "word-order", Options(task="text-classification")
    ).dest


def bag_of_words(project, monkeypatch, seed: int) -> float:
    """Validation accuracy of a logistic regression on word counts of the run's own split,
    encoded with the run's own vocabulary: everything the CNN sees, except the order."""
    monkeypatch.syspath_prepend(str(project / "src"))
    package = project.name.replace("-", "_")
    config = importlib.import_module(f"{package}.config")
    data = importlib.import_module(f"{package}.data").load_data(config.Config(seed=seed))
    size = len(data.vocabulary)

    def counts(split):
        rows = np.zeros((len(split), size), dtype=np.float32)
        for doc, (start, length) in enumerate(zip(split.starts, split.lengths, strict=True)):
            np.add.at(rows[doc], split.tokens[start : start + length].numpy(), 1.0)
        return rows

    with threadpool_limits(1):  # two BLAS threads on two busy cores slow the fit down
        model = LogisticRegression(max_iter=3000).fit(
            counts(data.train), data.train.targets.numpy()
        )
    return model.score(counts(data.val), data.val.targets.numpy())


@pytest.mark.parametrize("seed", [0, 1])
def test_the_cnn_reads_word_order_that_a_bag_of_words_cannot(project, tmp_path, monkeypatch, seed):
    package = project.name.replace("-", "_")
    out = tmp_path / "run"
    command = [PYTHON, "-m", f"{package}.train", "--out", str(out), "--seed", str(seed)]
    command += ["--epochs", str(EPOCHS), "--device", "cpu"]
    result = run(command, project, env=project_env())
    assert result.returncode == 0, result.stderr
    with open(out / "metrics.csv", newline="") as f:
        cnn = float(list(csv.DictReader(f))[-1]["val_accuracy"])
    bow = bag_of_words(project, monkeypatch, seed)
    report = f"seed {seed}: CNN {cnn:.4f}, bag of words {bow:.4f} (chance 0.25)"
    print(report)
    # The class keywords (in half the documents) are all a bag of words can use: about 0.6.
    assert bow < 0.75, report
    assert cnn > bow + 0.15, report
