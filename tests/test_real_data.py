"""On real tabular data read from CSV, a generated project matches a logistic regression."""

import csv
import importlib

import pytest

from scaffold.options import Options
from tests.conftest import render

sklearn_datasets = pytest.importorskip("sklearn.datasets")
LogisticRegression = pytest.importorskip("sklearn.linear_model").LogisticRegression

# The proof tier: minutes of training, kept out of the everyday run.
pytestmark = [pytest.mark.slow, pytest.mark.proof]


@pytest.mark.parametrize("dataset", ["load_breast_cancer", "load_wine"])
def test_classification_on_real_csv_matches_logistic_regression(tmp_path, monkeypatch, dataset):
    # scikit-learn ships these tables inside the package: real data, no download.
    ds = getattr(sklearn_datasets, dataset)()
    path = tmp_path / f"{dataset}.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*ds.feature_names, "label"])
        writer.writerows([*x, ds.target_names[y]] for x, y in zip(ds.data, ds.target, strict=True))

    project = render(tmp_path / f"real-{dataset.replace('_', '-')}", Options()).dest
    monkeypatch.syspath_prepend(str(project / "src"))
    package = project.name.replace("-", "_")
    config = importlib.import_module(f"{package}.config")
    data_module = importlib.import_module(f"{package}.data")
    train = importlib.import_module(f"{package}.train")

    ours, baseline, n_val = [], [], 0
    for seed in (0, 1, 2):
        cfg = config.Config(
            data=str(path), target="label", seed=seed, out=str(tmp_path / "run"), device="cpu"
        )
        data = data_module.load_data(cfg)  # the project's own split and standardisation
        n_val = len(data.val)
        model = LogisticRegression(max_iter=5000).fit(data.train.features, data.train.targets)
        baseline.append(model.score(data.val.features, data.val.targets))
        ours.append(train.fit(cfg)["history"][-1]["val_accuracy"])
    mean_ours, mean_baseline = sum(ours) / 3, sum(baseline) / 3
    # Within two validation samples of logistic regression, on average over three seeds.
    assert mean_ours >= mean_baseline - 2 / n_val, (ours, baseline)
    assert mean_ours > 0.95, ours
