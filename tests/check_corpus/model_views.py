"""SlowFast's and open_clip's style: a test script that builds the model once per number of
views (build_model, a FLOP count through `stats_fun = flop_count`, a profile under
FlopCounterMode retried on the CPU) and tests it in a helper decorated @torch.no_grad(); a
trainer gathers its parameter groups per submodule. Issue 25, 2026-12-04."""

import torch
from fvcore.nn import activation_count, flop_count
from slowfast.models import build_model
from torch.utils.flop_counter import FlopCounterMode


def get_model_stats(model, inputs, mode):
    if mode == "flop":
        stats_fun = flop_count
    else:
        stats_fun = activation_count
    training = model.training
    model.eval()
    counts, *_ = stats_fun(model, inputs)
    model.train(training)
    return sum(counts.values())


def profile_torch(model, inputs):
    counter = FlopCounterMode()
    with counter:
        model(inputs)
    return sum(counter.get_flop_counts()["Global"].values())


@torch.no_grad()
def perform_test(loader, model):
    model.eval()
    correct = 0
    for inputs, labels in loader:
        correct += (model(inputs).argmax(1) == labels).sum().item()
    return correct / len(loader.dataset)


def test(cfg, loader, example):
    results = []
    for views in cfg.views:
        cfg.views_now = views
        model = build_model(cfg)
        model.eval()
        print(get_model_stats(model, example, "flop"))
        results.append(perform_test(loader, model))
    retries = 2
    while retries:
        retries -= 1
        try:
            print(profile_torch(model, example))
            break
        except RuntimeError:
            model = model.to("cpu")
            example = example.to("cpu")
    return results


class Trainer:
    def __init__(self, student, teacher):
        self.student, self.teacher = student, teacher

    def train(self):
        self.student.train()
        self.teacher.eval()

    def get_params_for_submodel(self, m):
        return [{"params": [p for p in m.parameters() if p.requires_grad]}]

    def get_params_groups(self):
        groups = []
        for m in self.student.values():
            groups += self.get_params_for_submodel(m)
        return groups
