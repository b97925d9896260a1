"""The first check to run: the model, loss and optimizer can memorise one batch."""

from classification_full.overfit import overfit_one_batch


def test_overfits_one_batch(cfg):
    result = overfit_one_batch(cfg, max_steps=500)
    assert result["last_loss"] < 0.01 * result["first_loss"], result
    assert result["metrics"]["accuracy"] == 1.0, result
    assert result["steps"] < 500, result
    assert result["passed"]
