"""Every check and the codes it reports, run over the checked files (step_checks.py,
epoch_checks.py and setup_checks.py hold the checks themselves).

Out of reach statically: what values decide at run time (a GradScaler built with
enabled=flag is taken as on; `if step % k == 0` is read as either branch, never as a count;
a dtype, a patience or a scheduler mode read from a config file), which optimizer a backward()
feeds when two models share one loss graph (a GAN's step moved between its discriminator's two
backward() calls is not seen), and objects reached through containers, getattr or dynamic
dispatch. Helpers are followed into every file checked in the same run (project.py).
"""

import ast

from scaffold.check.epoch_checks import (
    epoch_scheduler_per_batch,
    eval_mode_left_on,
    evaluation_in_training_mode,
    evaluation_with_grad,
    inference_in_training_mode,
    per_batch_mean,
    plateau_metric,
    plateau_without_metric,
    schedulers_in_epoch_loops,
)
from scaffold.check.flow import Module
from scaffold.check.project import Project
from scaffold.check.setup_checks import (
    compiled_state_saved,
    nothing_seeded,
    sampler_without_set_epoch,
    unsafe_load,
    workers_without_generator,
)
from scaffold.check.step_checks import (
    accumulation_cadence,
    accumulation_without_division,
    autocast_around_update,
    ema_before_step,
    loss_tensor_kept,
    optimizer_before_move,
    scaler_with_bf16,
    step_order,
)


def check_tree(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    """Every finding of one parsed file on its own, as (node, code) pairs in source order."""
    project = Project()
    project.add(tree)
    project.finish()
    return [(node, code) for _, node, code in check_project(project)]


def check_project(
    project: Project, wanted=None, problems: list | None = None
) -> list[tuple[Module, ast.AST, str]]:
    """Every finding in the project's files, as (file, node, code), once each; only the checks
    of the codes `wanted` (a predicate) when given. A finding in a helper is reported in the
    helper's file, whichever file's loop called it. A check that fails on a file adds a line
    to `problems` (raises without it); the other checks go on."""
    found = {}
    checks = [c for c, codes in CHECKS if wanted is None or any(map(wanted, codes))]
    for module in project.modules:
        for check in checks:
            try:
                results = list(check(module))
            except Exception as err:
                if problems is None:
                    raise
                problems.append(
                    f"{module.path or '<source>'}: internal error in scaffold check "
                    f"({check.__name__}: {err!r}); the other checks ran, please report it"
                )
                continue
            for node, code in results:
                home = project.module_at(node)
                key = (project.modules.index(home), node.lineno, node.col_offset, code)
                found.setdefault(key, (home, node, code))
    return [found[key] for key in sorted(found)]


# Each check, and the codes it reports.
CHECKS = (
    (optimizer_before_move, ("SCF101",)),
    (step_order, ("SCF201", "SCF202", "SCF301", "SCF401", "SCF501", "SCF502", "SCF503", "SCF504")),
    (ema_before_step, ("SCF302",)),
    (autocast_around_update, ("SCF601",)),
    (scaler_with_bf16, ("SCF602",)),
    (epoch_scheduler_per_batch, ("SCF701",)),
    (schedulers_in_epoch_loops, ("SCF701", "SCF702", "SCF703")),
    (plateau_without_metric, ("SCF801",)),
    (plateau_metric, ("SCF802", "SCF803")),
    (eval_mode_left_on, ("SCF901",)),
    (evaluation_with_grad, ("SCF1001",)),
    (evaluation_in_training_mode, ("SCF1002",)),
    (inference_in_training_mode, ("SCF1002",)),
    (loss_tensor_kept, ("SCF1101",)),
    (per_batch_mean, ("SCF1201",)),
    (accumulation_without_division, ("SCF1401",)),
    (accumulation_cadence, ("SCF1402", "SCF1403")),
    (sampler_without_set_epoch, ("SCF1501",)),
    (unsafe_load, ("SCF2301",)),
    (compiled_state_saved, ("SCF2401",)),
    (nothing_seeded, ("SCF3101",)),
    (workers_without_generator, ("SCF3201",)),
)
