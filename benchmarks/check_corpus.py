"""`scaffold check` on real repositories: every finding judged, and bugs injected into real scripts.

    python benchmarks/check_corpus.py TREES                 # findings, verdicts, precision, speed
    python benchmarks/check_corpus.py TREES --inject        # and the injected bugs: recall
    python benchmarks/check_corpus.py TREES --inject --markdown benchmarks/results/check_corpus.md

TREES is a folder with one checked-out repository per subfolder, named owner+name (as the
search tool's `fetch` names its mirrors). Nothing fetched is committed; CI cannot fetch, so no
test runs this on real repositories. To make TREES from the mirrors:

    for g in /work/.mirror/*/repo; do n=$(basename $(dirname $g)); mkdir -p TREES/$n
      git --git-dir=$g ls-tree -r --name-only HEAD | grep '\\.py$' | while read f; do
        mkdir -p "TREES/$n/$(dirname "$f")"; git --git-dir=$g show "HEAD:$f" > "TREES/$n/$f"
      done; done

Each repository is checked as one run (`scaffold check REPO`), as its users would run it, with
the default rules; SCF2301 (torch.load without weights_only) is counted apart from the loop
rules. A finding's verdict is looked up in VERDICTS by (repository, path, code, the text of its
line), so a verdict outlives lines moved by unrelated edits; a finding with no verdict is
printed as `unjudged` and counts as false until someone judges it.

Injections: each INJECTIONS entry replaces one exact piece of text of one real script with a
classic bug, written in that script's own style, in a copy of its repository; it is caught when
the check of the copy reports the expected code at a line it did not report before. They run
one at a time.

To measure the code of an older commit: `git archive OLD scaffold | tar -x -C /tmp/old` and run
this script with PYTHONPATH=/tmp/old.
"""

# ruff: noqa: E501  (VERDICTS quote the judged source lines whole)

import argparse
import ast
import datetime
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path and "scaffold" not in sys.modules:
    sys.path.append(str(REPO_ROOT))  # after PYTHONPATH: an older copy given there wins

from scaffold.check.run import check_paths  # noqa: E402

LOAD = "SCF2301"  # torch.load without weights_only: counted apart from the loop rules


# --- verdicts: (repo, path, code, stripped line text) -> (verdict, why) ---

T, D, F = "true", "debatable", "false"
VERDICTS: dict = {}


def verdict(repo, path, code, line, judged, why):
    VERDICTS[repo, path, code, line.strip()] = (judged, why)


# Every finding of the code before issue 25 and after it, judged by reading the code around it.
verdict(
    "Lightning-AI+lit-llama",
    "generate.py",
    "SCF1001",
    "for i in range(num_samples):",
    F,
    "the loop calls generate(), which is decorated @torch.no_grad()",
)
verdict(
    "Lightning-AI+lit-llama",
    "generate/full.py",
    "SCF1001",
    "for i in range(num_samples):",
    F,
    "the loop calls generate(), which is decorated @torch.no_grad()",
)
verdict(
    "facebookresearch+deit",
    "main.py",
    "SCF1001",
    "for epoch in range(args.start_epoch, args.epochs):",
    F,
    "the epoch loop: training through the NativeScaler object, and evaluate() is @torch.no_grad()",
)
verdict(
    "facebookresearch+dino",
    "eval_copy_detection.py",
    "SCF1001",
    "for q in dataset.query_blocks:",
    F,
    "extract_features() is decorated @torch.no_grad()",
)
verdict(
    "facebookresearch+dino",
    "eval_copy_detection.py",
    "SCF1001",
    "for b in dataset.database_blocks:",
    F,
    "extract_features() is decorated @torch.no_grad()",
)
verdict(
    "facebookresearch+dino",
    "eval_linear.py",
    "SCF1002",
    "for inp, target in metric_logger.log_every(val_loader, 20, header):",
    F,
    "linear probe: the backbone is put in eval before the epoch loop on purpose; only the linear head trains",
)
verdict(
    "facebookresearch+dino",
    "eval_video_segmentation.py",
    "SCF1001",
    "for i, video_name in enumerate(video_list):",
    F,
    "every parameter has requires_grad=False and the helpers run under no_grad",
)
verdict(
    "facebookresearch+dino",
    "utils.py",
    "SCF201",
    "p.grad = None",
    F,
    "cancel_gradients_last_layer clears some gradients (freezing the last layer), not a zero_grad",
)
verdict(
    "huggingface+accelerate",
    "benchmarks/fp8/ms_amp/ddp.py",
    "SCF502",
    "optimizer.step()",
    T,
    "scaler.scale(loss).backward() then optimizer.step(): gradients stay multiplied by the scale and inf/nan steps are not skipped",
)
verdict(
    "huggingface+accelerate",
    "benchmarks/fp8/torchao/ddp.py",
    "SCF601",
    "loss.backward()",
    D,
    "backward() inside the autocast block: PyTorch advises against it; it works in practice",
)
verdict(
    "huggingface+accelerate",
    "benchmarks/fp8/torchao/non_distributed.py",
    "SCF601",
    "loss.backward()",
    D,
    "backward() inside the autocast block: PyTorch advises against it; it works in practice",
)
verdict(
    "huggingface+accelerate",
    "benchmarks/torch.compile/regional_compilation.py",
    "SCF1001",
    "for model, sub_label, description, stmt, iters in [",
    D,
    "a benchmark times the model's inference with autograd on (its Timer statement has no no_grad)",
)
verdict(
    "huggingface+accelerate",
    "examples/by_feature/fsdp_with_peak_mem_tracking.py",
    "SCF1401",
    "accelerator.backward(loss)",
    T,
    "steps every gradient_accumulation_steps batches and never divides the loss",
)
verdict(
    "huggingface+accelerate",
    "tests/test_optimizer.py",
    "SCF202",
    "optimizer.step()",
    F,
    "a unit test with faked gradients and no loop",
)
verdict(
    "huggingface+accelerate",
    "tests/test_scheduler.py",
    "SCF1001",
    "for num_steps in steps:",
    F,
    "a scheduler test that steps an optimizer; nothing is evaluated",
)
verdict(
    "huggingface+accelerate",
    "tests/test_state_checkpointing.py",
    "SCF101",
    "model.to(accelerator.device)",
    F,
    "model.to() after building the optimizer keeps each Parameter (torch 2.x); the test checks exactly that",
)
verdict(
    "huggingface+pytorch-image-models",
    "legacy_train.py",
    "SCF901",
    "model.eval()",
    F,
    "validate() puts the EMA copy in eval; the next training pass trains the model, not the EMA",
)
verdict(
    "openai+guided-diffusion",
    "scripts/classifier_sample.py",
    "SCF1001",
    "while len(all_images) * args.batch_size < args.num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "openai+guided-diffusion",
    "scripts/image_nll.py",
    "SCF1001",
    "while num_complete < num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "openai+guided-diffusion",
    "scripts/image_sample.py",
    "SCF1001",
    "while len(all_images) * args.batch_size < args.num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "openai+guided-diffusion",
    "scripts/super_res_sample.py",
    "SCF1001",
    "while len(all_images) * args.batch_size < args.num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "openai+improved-diffusion",
    "scripts/image_nll.py",
    "SCF1001",
    "while num_complete < num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "openai+improved-diffusion",
    "scripts/image_sample.py",
    "SCF1001",
    "while len(all_images) * args.batch_size < args.num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "openai+improved-diffusion",
    "scripts/super_res_sample.py",
    "SCF1001",
    "while len(all_images) * args.batch_size < args.num_samples:",
    F,
    "the sampling/bpd helpers run every model call under th.no_grad()",
)
verdict(
    "pytorch+examples",
    "distributed/minGPT-ddp/mingpt/trainer.py",
    "SCF501",
    "torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)",
    T,
    "clip_grad_norm_ after scaler.scale(loss).backward() without scaler.unscale_(): the threshold is off by the scale",
)
verdict(
    "pytorch+examples",
    "distributed/tensor_parallelism/fsdp_tp_example.py",
    "SCF202",
    "optimizer.step()",
    T,
    "10 iterations and no zero_grad: the gradients add up (a demo, but the bug is real)",
)
verdict(
    "pytorch+examples",
    "distributed/tensor_parallelism/sequence_parallel_example.py",
    "SCF202",
    "optimizer.step()",
    T,
    "10 iterations and no zero_grad: the gradients add up (a demo, but the bug is real)",
)
verdict(
    "pytorch+examples",
    "distributed/tensor_parallelism/tensor_parallel_example.py",
    "SCF202",
    "optimizer.step()",
    T,
    "10 iterations and no zero_grad: the gradients add up (a demo, but the bug is real)",
)
verdict(
    "pytorch+examples",
    "language_translation/main.py",
    "SCF1001",
    "while True:",
    T,
    "interactive inference: greedy_decode runs the model with autograd on for every sentence",
)
verdict(
    "pytorch+examples",
    "language_translation/main.py",
    "SCF1001",
    "for src, tgt in tqdm(valid_dl):",
    T,
    "validate() calls model.eval() but no no_grad (its comment says it turns gradients off)",
)
verdict(
    "pytorch+examples",
    "super_resolution/main.py",
    "SCF1002",
    "for batch in testing_data_loader:",
    D,
    "test() never calls model.eval(); this Net has no dropout or BatchNorm, so no effect today",
)
verdict(
    "pytorch+ignite",
    "assets/tldr/teaser.py",
    "SCF701",
    "lr_scheduler.step()",
    F,
    "StepLR(step_size=num_iters_per_epoch) stepped per iteration decays once per epoch",
)
verdict(
    "pytorch+ignite",
    "examples/references/segmentation/pascal_voc2012/main.py",
    "SCF1401",
    "scaler.scale(loss).backward()",
    F,
    "the loss is divided by accumulation_steps in forward_pass(), which returns it",
)
verdict(
    "pytorch+ignite",
    "ignite/engine/__init__.py",
    "SCF503",
    "scaler.step(optimizer)",
    F,
    "cast(torch.Tensor, scaler.scale(loss)).backward() is a scaled backward",
)
verdict(
    "pytorch+ignite",
    "ignite/engine/__init__.py",
    "SCF1401",
    "scaled_loss.backward()",
    F,
    "the loss is divided before apex's scale_loss(loss) gives scaled_loss",
)
verdict(
    "ultralytics+yolov5",
    "classify/val.py",
    "SCF1001",
    "for images, labels in bar:",
    F,
    "run() is decorated @smart_inference_mode(), the project's wrapper of torch.inference_mode",
)
verdict(
    "ultralytics+yolov5",
    "export.py",
    "SCF1001",
    "for _ in range(2):",
    F,
    "run() is decorated @smart_inference_mode(), the project's wrapper of torch.inference_mode",
)
verdict(
    "ultralytics+yolov5",
    "segment/train.py",
    "SCF101",
    "model.half().float()  # pre-reduce anchor precision",
    F,
    "model.half().float(): a deliberate round trip that keeps each Parameter (torch 2.x)",
)
verdict(
    "ultralytics+yolov5",
    "segment/val.py",
    "SCF1001",
    "for batch_i, (im, targets, paths, shapes, masks) in enumerate(pbar):",
    F,
    "run() is decorated @smart_inference_mode(), the project's wrapper of torch.inference_mode",
)
verdict(
    "ultralytics+yolov5",
    "train.py",
    "SCF101",
    "model.half().float()  # pre-reduce anchor precision",
    F,
    "model.half().float(): a deliberate round trip that keeps each Parameter (torch 2.x)",
)
verdict(
    "ultralytics+yolov5",
    "utils/torch_utils.py",
    "SCF1001",
    "for p in self.ema.parameters():",
    F,
    "the loop only sets requires_grad_(False) on the EMA's parameters",
)
verdict(
    "ultralytics+yolov5",
    "val.py",
    "SCF1001",
    "for batch_i, (im, targets, paths, shapes) in enumerate(pbar):",
    F,
    "run() is decorated @smart_inference_mode(), the project's wrapper of torch.inference_mode",
)
verdict(
    "yunjey+pytorch-tutorial",
    "tutorials/03-advanced/neural_style_transfer/main.py",
    "SCF1001",
    "for f1, f2, f3 in zip(target_features, content_features, style_features):",
    F,
    "style transfer: the loop sums the style loss that is then backpropagated",
)


# --- injections ---


@dataclass
class Injection:
    repo: str
    path: str
    edits: tuple  # (old, new) pairs, each old text found exactly once
    codes: tuple
    bug: str
    scope: tuple = ()  # the paths checked, relative to the repository; the whole one if empty


def inject(repo, path, bug, codes, *edits, scope=()):
    INJECTIONS.append(Injection(repo, path, edits, tuple(codes.split()), bug, scope))


# Issue 27's rules (SCF302, SCF1402, SCF1403, SCF2401, warm-ups under SCF703), and the four
# repositories added for them (ConvNeXt, build-nanogpt, denoising-diffusion-pytorch, litgpt).
verdict(
    "karpathy+nanoGPT",
    "train.py",
    "SCF2401",
    "'model': raw_model.state_dict(),",
    D,
    "with compile=True (its default) raw_model is the compiled module: every key is saved with "
    "`_orig_mod.`; nanoGPT's own loaders (train.py resume, sample.py) strip the prefix, any other "
    "loader fails",
)
verdict(
    "karpathy+build-nanogpt",
    "train_gpt2.py",
    "SCF2401",
    "'model': raw_model.state_dict(),",
    D,
    "compiled only when use_compile is set (False in the file, as compile broke its evals); set, "
    "the checkpoint keys carry `_orig_mod.` and nothing in the repository strips them",
)
verdict(
    "karpathy+build-nanogpt",
    "train_gpt2.py",
    "SCF1002",
    'for i, example in enumerate(iterate_examples("val")):',
    F,
    "before issue 27's session only: the HellaSwag block runs under `(step % 250 == 0 or "
    "last_step) and ...`, which implies the validation block's `step % 250 == 0 or last_step` "
    "that put the model in eval; an `if a and b:` after `if a:` is now read as implied",
)


# Issue: precision on repositories nobody here had looked at (11 new ones, see docs/check-recall.md).

verdict(
    "clovaai+deep-text-recognition-benchmark",
    "test.py",
    "SCF1001",
    "for i, (image_tensors, labels) in enumerate(evaluation_loader):",
    F,
    "validation() is only ever called under no_grad, through benchmark_all_eval() two callers up (fixed: callers are followed three levels)",
)
verdict(
    "facebookresearch+barlowtwins",
    "evaluate.py",
    "SCF901",
    "model.eval()",
    F,
    "--weights freeze: the backbone is put in eval for the training pass on purpose, each epoch (fixed)",
)
verdict(
    "facebookresearch+barlowtwins",
    "evaluate.py",
    "SCF901",
    "model.eval()",
    F,
    "the next epoch sets the mode again: train() for finetune, eval() on purpose for freeze, else assert False (fixed)",
)
verdict(
    "facebookresearch+moco-v3",
    "main_lincls.py",
    "SCF901",
    "model.eval()",
    F,
    "linear probe: train() puts the frozen backbone in eval on purpose, as its comment says (fixed)",
)
verdict(
    "facebookresearch+moco",
    "main_lincls.py",
    "SCF901",
    "model.eval()",
    F,
    "linear probe: train() puts the frozen backbone in eval on purpose, as its comment says (fixed)",
)
verdict(
    "facebookresearch+simsiam",
    "main_lincls.py",
    "SCF901",
    "model.eval()",
    F,
    "linear probe: train() puts the frozen backbone in eval on purpose, as its comment says (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/ASR/Adapter/data_load.py",
    "SCF1501",
    "train_sampler = torch.utils.data.distributed.DistributedSampler(trainset)",
    T,
    "DistributedSampler and set_epoch() is never called anywhere in the project: the same shuffle every epoch",
)
verdict(
    "jindongwang+transferlearning",
    "code/ASR/Adapter/data_load.py",
    "SCF1501",
    "train_sampler = torch.utils.data.distributed.DistributedSampler(trainset)",
    T,
    "DistributedSampler and set_epoch() is never called anywhere in the project: the same shuffle every epoch",
)
verdict(
    "jindongwang+transferlearning",
    "code/ASR/CMatch/data_load.py",
    "SCF1501",
    "train_sampler = torch.utils.data.distributed.DistributedSampler(trainset)",
    T,
    "DistributedSampler and set_epoch() is never called anywhere in the project: the same shuffle every epoch",
)
verdict(
    "jindongwang+transferlearning",
    "code/ASR/Adapter/train.py",
    "SCF401",
    "grad_norm = clip_grad_norm_(model.parameters(), args.grad_clip)",
    F,
    "the step runs only when the clipped norm is not NaN (`if math.isnan(grad_norm): skip else step`), then zero_grad: the path clip -> zero_grad is that skip (fixed 2026-12-04)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/DaNN/main.py",
    "SCF1002",
    "for batch_id, (data, target) in enumerate(data_tar):",
    F,
    "model.eval() is the first statement inside the evaluation loop, before the forward (fixed 2026-12-04)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/DNNtest/eval_nc.py",
    "SCF1001",
    "for i, (images, label) in enumerate(loader):",
    F,
    "a PGD attack: the loop calls torch.autograd.grad, no_grad would break it (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/DNNtest/eval_nc.py",
    "SCF1001",
    "for i, (images, label) in enumerate(loader):",
    F,
    "a PGD attack: the loop calls torch.autograd.grad, no_grad would break it (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/DNNtest/eval_nc.py",
    "SCF1001",
    "for idx, (images, label) in enumerate(loader):",
    F,
    "a PGD attack: the loop calls torch.autograd.grad, no_grad would break it (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/distillation_training.py",
    "SCF1002",
    "for i, (batch, label) in enumerate(loader):",
    F,
    "test() puts the teacher in eval and runs it under the same `if loss:` test (fixed 2026-12-04: a module run only under an if the path did not take is not evaluated there)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/eval_robustness.py",
    "SCF1001",
    "for i, (batch, label) in enumerate(loader):",
    D,
    "adversary.perturb() needs autograd; only the clean forward could run under no_grad",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/finetuner.py",
    "SCF1101",
    "ce_loss_meter.update(loss)",
    T,
    "MovingAverageMeter.update() keeps avg = m * avg + (1 - m) * loss: a tensor chaining every step's graph",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_adv/utils.py",
    "SCF1001",
    "for i, (batch, label, adv_batch, adv_label) in enumerate(test_loader):",
    T,
    "advtest_fast(): a plain evaluation over saved adversarial batches with autograd on (the function is never called)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_backdoor/eval_robustness.py",
    "SCF1001",
    "for i, (batch, label) in enumerate(loader):",
    D,
    "adversary.perturb() needs autograd; only the clean forward could run under no_grad",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_backdoor/finetuner.py",
    "SCF1101",
    "ce_loss_meter.update(ce_loss)",
    T,
    "MovingAverageMeter.update() keeps avg = m * avg + (1 - m) * ce_loss: a tensor chaining every step's graph",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_backdoor/remos/my_profile.py",
    "SCF1001",
    "for i, (images, label) in enumerate(loader):",
    F,
    "a PGD attack: the loop calls torch.autograd.grad, no_grad would break it (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/ReMoS/CV_backdoor/utils.py",
    "SCF1001",
    "for i, (batch, label, adv_batch, adv_label) in enumerate(test_loader):",
    T,
    "advtest_fast(): a plain evaluation over saved adversarial batches with autograd on (the function is never called)",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/TCP/finetune.py",
    "SCF1001",
    "for data, target in self.target_test_loader:",
    T,
    "Variable(data, volatile=True) has done nothing since PyTorch 0.4: the graph is built",
)
verdict(
    "jindongwang+transferlearning",
    "code/deep/finetune_AlexNet_ResNet/finetune_office31.py",
    "SCF901",
    "model.eval()",
    F,
    "a loop over phases: each phase sets its own mode, train() for the training phase (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/feature_extractor/for_digit_data/digit_deep_feature.py",
    "SCF901",
    "model.eval()",
    F,
    "a loop over phases: each phase sets its own mode, train() for the training phase (fixed)",
)
verdict(
    "jindongwang+transferlearning",
    "code/feature_extractor/for_image_data/main.py",
    "SCF901",
    "model.eval()",
    F,
    "a loop over phases: each phase sets its own mode, train() for the training phase (fixed)",
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/legacy_main.py",
    "SCF602",
    "scaler = torch.amp.GradScaler(device=device)",
    F,
    'the scaler is built only when args.precision == "amp", which get_autocast maps to float16 (fixed 2026-12-04)',
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/legacy_main.py",
    "SCF602",
    "scaler = torch.cuda.amp.GradScaler()",
    F,
    'the scaler is built only when args.precision == "amp", which get_autocast maps to float16 (fixed 2026-12-04)',
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/main.py",
    "SCF602",
    "scaler = torch.amp.GradScaler(device=device)",
    F,
    'the scaler is built only when need_scaler: precision "amp" (float16) or an FSDP float16 dtype (fixed 2026-12-04)',
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/main.py",
    "SCF602",
    "scaler = torch.cuda.amp.GradScaler()",
    F,
    'the scaler is built only when need_scaler: precision "amp" (float16) or an FSDP float16 dtype (fixed 2026-12-04)',
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/legacy_train.py",
    "SCF901",
    "dist_model.eval()",
    F,
    "the distillation teacher is put in eval for the pass, which runs it only under no_grad (fixed)",
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/legacy_train.py",
    "SCF503",
    "scaler.step(optimizer)",
    F,
    "backward(total_loss, scaler) runs scaler.scale(loss).backward() whenever scaler is not None (fixed 2026-12-04: the project's own backward() is read)",
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/train.py",
    "SCF503",
    "scaler.step(optimizer)",
    F,
    "backward(total_loss, scaler) runs scaler.scale(loss).backward() whenever scaler is not None (fixed 2026-12-04: the project's own backward() is read)",
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/profiler.py",
    "SCF1001",
    "while retries:",
    F,
    "a retry loop (two tries) around FLOP profilers, not an evaluation over data (fixed 2026-12-04: a forward under FlopCounterMode is a measurement)",
)
verdict(
    "mlfoundations+open_clip",
    "src/open_clip_train/train.py",
    "SCF202",
    "optimizer.step()",
    F,
    "a torch.compile'd step closure; its caller calls optimizer.zero_grad() before each call (fixed 2026-12-04: calls through a factory's returned closure are resolved)",
)


# 2026-12-04: 19 more repositories nobody here had looked at (see docs/check-recall.md).
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-09_SOAP/train_gpt2.py",
    "SCF1101",
    "val_loss += loss",
    F,
    "under torch.no_grad() the loss has no graph: a tensor sum kept for the all_reduce holds nothing (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-10_Muon/train_gpt2.py",
    "SCF1101",
    "val_loss += loss",
    F,
    "under torch.no_grad() the loss has no graph: a tensor sum kept for the all_reduce holds nothing (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-09_SOAP/train_gpt2.py",
    "SCF2401",
    "log = dict(step=step, code=code, model=raw_model.state_dict(), optimizers=[opt.state_dict() for opt in optimizers])",
    D,
    "the compiled module's state dict: every key is saved with `_orig_mod.` and nothing in the repository loads or strips them (the rule's claim holds; a record script that never reloads)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-10_Muon/train_gpt2.py",
    "SCF2401",
    "log = dict(step=step, code=code, model=raw_model.state_dict(), optimizers=[opt.state_dict() for opt in optimizers])",
    D,
    "the compiled module's state dict: every key is saved with `_orig_mod.` and nothing in the repository loads or strips them (the rule's claim holds; a record script that never reloads)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-14_ModernArch/train_gpt2.py",
    "SCF2401",
    "log = dict(step=step, code=code, model=raw_model.state_dict(), optimizers=[opt.state_dict() for opt in optimizers])",
    D,
    "the compiled module's state dict: every key is saved with `_orig_mod.` and nothing in the repository loads or strips them (the rule's claim holds; a record script that never reloads)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-12-04_ValueEmbed/train_gpt2.py",
    "SCF2401",
    "log = dict(step=step, code=code, model=raw_model.state_dict(), optimizers=[opt.state_dict() for opt in optimizers])",
    D,
    "the compiled module's state dict: every key is saved with `_orig_mod.` and nothing in the repository loads or strips them (the rule's claim holds; a record script that never reloads)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_2_medium/2024-12-31_Target350M/train_gpt.py",
    "SCF2401",
    "log = dict(step=step, code=code, model=model.state_dict(), optimizers=[opt.state_dict() for opt in optimizers])",
    D,
    "the compiled module's state dict: every key is saved with `_orig_mod.` and nothing in the repository loads or strips them (the rule's claim holds; a record script that never reloads)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-09_SOAP/train_gpt2.py",
    "SCF1401",
    "loss.backward()",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-09_SOAP/train_gpt2.py",
    "SCF1401",
    "loss.backward() # just sync on the last step",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-10_Muon/train_gpt2.py",
    "SCF1401",
    "loss.backward()",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-10_Muon/train_gpt2.py",
    "SCF1401",
    "loss.backward() # just sync on the last step",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-14_ModernArch/train_gpt2.py",
    "SCF1401",
    "loss.backward()",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-14_ModernArch/train_gpt2.py",
    "SCF1401",
    "loss.backward() # just sync on the last step",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-12-04_ValueEmbed/train_gpt2.py",
    "SCF1401",
    "loss.backward()",
    F,
    "each micro-batch's loss is summed by backward, then `p.grad /= train_accumulation_steps` for every parameter before the step: the same mean (fixed)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_1_short/2024-10-14_ModernArch/train_gpt2.py",
    "SCF1001",
    "for _ in range(val_steps):",
    D,
    "validation under autocast but not no_grad, on purpose: its comment says no_grad broke torch.compile; the graph is built and freed every batch",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_2_medium/2024-12-31_Target350M/train_gpt.py",
    "SCF1002",
    "for _ in range(val_steps):",
    F,
    "model.eval() is called on the module that `ddp_model = DDP(model)` wraps: the wrapper runs it in eval mode (fixed)",
)
verdict(
    "eriklindernoren+PyTorch-GAN",
    "implementations/bicyclegan/bicyclegan.py",
    "SCF1001",
    'for img_A, img_B in zip(imgs["A"], imgs["B"]):',
    T,
    "sample_images(): generator.eval() then the generator's forward with autograd on; each builds a graph that is never used",
)
verdict(
    "eriklindernoren+PyTorch-GAN",
    "implementations/cluster_gan/clustergan.py",
    "SCF1001",
    "for idx in range(n_c):",
    T,
    "after generator.eval()/encoder.eval() the per-epoch sampling and cycle-loss evaluation run with autograd on",
)
verdict(
    "facebookresearch+SlowFast",
    "slowfast/visualization/ava_demo_precomputed_boxes.py",
    "SCF1001",
    "for keyframe_idx, boxes_and_labels in tqdm.tqdm(self.pred_boxes.items()):",
    T,
    "predictions over every keyframe with model.eval() and autograd on (preds.detach() after the forward: the graph is built each time); no caller sets no_grad",
)
verdict(
    "facebookresearch+SlowFast",
    "tools/test_net.py",
    "SCF1001",
    "for num_view in cfg.TEST.NUM_TEMPORAL_CLIPS:",
    F,
    "the loop only builds the model (build_model(cfg)), counts its FLOPs (`model_stats_fun = flop_count`) and calls perform_test(), which is decorated @torch.no_grad() (fixed)",
)
verdict(
    "facebookresearch+dinov2",
    "dinov2/train/ssl_meta_arch.py",
    "SCF1001",
    "for m in self.student.values():",
    F,
    "a loop that gathers parameter groups; no forward, nothing evaluated: `self.get_maybe_fused_params_for_submodel(m)` was taken for a model call by its name (fixed)",
)
verdict(
    "facebookresearch+fairseq",
    "examples/emotion_conversion/emotion_models/duration_predictor.py",
    "SCF202",
    "optimizer.step()",
    T,
    "train_epoch() never calls zero_grad (nor does the file): gradients accumulate over every batch of the run",
)
verdict(
    "facebookresearch+fairseq",
    "examples/emotion_conversion/emotion_models/duration_predictor.py",
    "SCF1001",
    "for x, y, mask, _ in loader:",
    T,
    "valid_epoch() runs the model with autograd on and its caller has no no_grad",
)
verdict(
    "facebookresearch+fairseq",
    "examples/emotion_conversion/emotion_models/pitch_predictor.py",
    "SCF202",
    "optimizer.step()",
    T,
    "the train/valid loop never calls zero_grad (nor does the file): gradients accumulate over every batch",
)
verdict(
    "facebookresearch+fairseq",
    "examples/speech_synthesis/preprocessing/speaker_embedder/__init__.py",
    "SCF1001",
    "for wav in inputs:",
    D,
    "a Module's forward() loop; its one caller (get_speaker_embedding.py) runs it for feature extraction with autograd on, which is the real fault, one call up",
)
verdict(
    "facebookresearch+fairseq",
    "examples/speech_to_speech/unity/sequence_generator.py",
    "SCF1001",
    "for step in range(max_len + 1):  # one extra step for EOS marker",
    F,
    "_generate() is reached through the base class's generate(), decorated @torch.no_grad() in fairseq/sequence_generator.py (fixed: an override with no caller of its own takes the callers of the method it overrides)",
)
verdict(
    "facebookresearch+fairseq",
    "fairseq_cli/train.py",
    "SCF1001",
    "for subset_idx, subset in enumerate(subsets):",
    F,
    "trainer.valid_step() runs the model under torch.no_grad() inside fairseq/trainer.py; the loop's `trainer.get_model()` (named like a model) was taken for a forward (fixed)",
)
verdict(
    "facebookresearch+fairseq",
    "tests/distributed/test_bmuf.py",
    "SCF202",
    "optimizer.step()",
    D,
    "a unit test that never zeroes the gradients over its iterations; both runs it compares do the same, so the test holds",
)
verdict(
    "huggingface+peft",
    "examples/pvera/confidence_interval_generation.py",
    "SCF202",
    "optimizer.step()",
    T,
    "the training loop over the dataset never calls zero_grad: gradients accumulate over every batch",
)
verdict(
    "huggingface+peft",
    "tests/test_decoder_models.py",
    "SCF1101",
    "losses.append(loss)",
    D,
    "a 5-step test keeps each loss tensor (and its graph) to compare the first and the last",
)
verdict(
    "huggingface+peft",
    "tests/test_other.py",
    "SCF202",
    "optimizer.step()",
    D,
    "a 5-step mock training with no zero_grad; only needs the weights to change",
)
verdict(
    "sgrvinod+a-PyTorch-Tutorial-to-Image-Captioning",
    "train.py",
    "SCF1002",
    "for i, (imgs, caps, caplens, allcaps) in enumerate(val_loader):",
    F,
    "`if encoder is not None: encoder.eval()` then `if encoder is not None: imgs = encoder(imgs)`: the same test guards both (fixed)",
)

# 2026-12-04, second set: 15 more repositories nobody here had looked at, checked with 752407a
# (see docs/check-recall.md), then the findings of the new step-loop SCF901 on the earlier 49.
SG2 = "NVlabs+stylegan2-ada-pytorch"
verdict(
    SG2,
    "metrics/perceptual_path_length.py",
    "SCF1001",
    "for batch_start in range(0, num_samples, batch_size * opts.num_gpus):",
    F,
    "the sampler is set `.eval().requires_grad_(False)` before the loop and its inputs need no grad: no graph is built (fixed: a frozen module's forward)",
)
verdict(
    SG2,
    "training/training_loop.py",
    "SCF1001",
    "images = torch.cat([G_ema(z=z, c=c, noise_mode='const').cpu() for z, c in zip(grid_z, grid_c)]).numpy()",
    F,
    "G_ema is a deep copy of G made while G was built `.requires_grad_(False)`, and nothing unfreezes it: no graph (fixed: a frozen module's forward, and a deep copy of one)",
)
verdict(
    "VainF+DeepLabV3Plus-Pytorch",
    "main.py",
    "SCF701",
    "scheduler.step()",
    F,
    "the run is counted in iterations (`while True:`, return once cur_itrs >= total_itrs); PolyLR(total_itrs) or StepLR(step_size=10000 iterations), stepped every batch on purpose (fixed)",
)
verdict(
    "karpathy+llm.c",
    "train_gpt2.py",
    "SCF401",
    "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)",
    F,
    "clip after the micro-step backward()s and before step(); only `--inference_only` skips the backward, and then clip and step both run on no gradients (fixed)",
)
verdict(
    "karpathy+llm.c",
    "train_llama3.py",
    "SCF401",
    "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)",
    F,
    "clip after the micro-step backward()s and before step(); only `--inference_only` skips the backward, and then clip and step both run on no gradients (fixed)",
)
verdict(
    "jwyang+faster-rcnn.pytorch",
    "test_net.py",
    "SCF1001",
    "for i in range(num_images):",
    T,
    "the test loop runs fasterRCNN (after .eval()) with autograd on, and reads `.data` after the forward: a graph is built for every image",
)
verdict(
    "pytorch+opacus",
    "examples/fsdp_llama3.py",
    "SCF1501",
    "sampler=DistributedSampler(train_dataset),",
    T,
    "DistributedSampler and no set_epoch() anywhere; make_private(poisson_sampling=False) keeps the loader, so every epoch (--epochs) repeats the shuffle",
)
verdict(
    "eriklindernoren+PyTorch-YOLOv3",
    "pytorchyolo/train.py",
    "SCF1401",
    "loss.backward()",
    D,
    "steps every `subdivisions` batches and sums the gradients undivided (Darknet's convention, its lr set for the sum); the shipped configs use subdivisions=1, so no accumulation by default",
)
LG = "Lightning-AI+litgpt"
for _path in ("litgpt/finetune/lora.py", "litgpt/finetune/lora_legacy.py"):
    verdict(
        LG,
        _path,
        "SCF901",
        "model.eval()",
        T,
        "generate_example() puts the model in eval and calls model.train() only when the prompt fits; otherwise fine-tuning goes on in eval mode, with the LoRA dropout (0.05 by default) off",
    )
for _path in (
    "litgpt/finetune/adapter.py",
    "litgpt/finetune/adapter_v2.py",
    "litgpt/finetune/full.py",
):
    verdict(
        LG,
        _path,
        "SCF901",
        "model.eval()",
        D,
        "generate_example() calls model.train() only when the prompt fits, so training can go on in eval mode; litgpt's GPT has no dropout or BatchNorm, so no effect today",
    )
verdict(
    "huggingface+peft",
    "examples/boft_dreambooth/train_dreambooth.py",
    "SCF901",
    "unet.eval()",
    T,
    "validation in the batch loop sets unet.eval(); unet.train() runs only at the next epoch, so the rest of the epoch trains with the BOFT dropout (0.1 by default) off",
)
verdict(
    "huggingface+peft",
    "examples/hra_dreambooth/train_dreambooth.py",
    "SCF901",
    "unet.eval()",
    D,
    "validation in the batch loop sets unet.eval() until the next epoch; HRA adds no dropout, so no effect with the default UNet",
)
# False alarms of the step-loop SCF901 while it was being written, fixed before it was committed.
verdict(
    "facebookresearch+dinov2",
    "dinov2/eval/utils.py",
    "SCF901",
    "model.eval()",
    F,
    "evaluate() puts the frozen feature extractor in eval; no optimizer holds it and nothing trains it (fixed: only modules something trains count)",
)
verdict(
    "pytorch+examples",
    "fast_neural_style/neural_style/neural_style.py",
    "SCF901",
    "transformer.eval().cpu()",
    F,
    "`transformer.to(device).train()` puts it back (fixed: a mode call at the end of a chain of moves)",
)
verdict(
    "KellerJordan+modded-nanogpt",
    "records/track_3_optimization/results/20260506_trustlight/train_gpt_simple_trustlight.py",
    "SCF901",
    "model.eval()",
    F,
    "the early stops `break` out of the loop before model.train(); every path that goes on calls it (fixed: a path that breaks has no next step)",
)

INJECTIONS: list = []
EX, NANO = "pytorch+examples", "karpathy+nanoGPT"
DEIT, MAE = "facebookresearch+deit", "facebookresearch+mae"
MNIST, IMNET = "mnist/main.py", "imagenet/main.py"
MNIST_SCOPE, IMNET_SCOPE = ("mnist",), ("imagenet",)

# pytorch/examples mnist: a plain script, train() and test() functions, StepLR per epoch.
inject(
    EX,
    MNIST,
    "zero_grad removed",
    "SCF202",
    ("        optimizer.zero_grad()\n        output = model(data)", "        output = model(data)"),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "zero_grad between backward and step",
    "SCF201",
    (
        "        optimizer.zero_grad()\n        output = model(data)\n"
        "        loss = F.nll_loss(output, target)\n        loss.backward()\n",
        "        output = model(data)\n        loss = F.nll_loss(output, target)\n"
        "        loss.backward()\n        optimizer.zero_grad()\n",
    ),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "step before backward",
    "SCF301",
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        optimizer.step()\n        loss.backward()\n",
    ),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "model.train() removed",
    "SCF901",
    ("    model.train()\n    for batch_idx", "    for batch_idx"),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "model.eval() removed",
    "SCF1002",
    ("    model.eval()\n    test_loss = 0", "    test_loss = 0"),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "no_grad removed (its block kept as `if True:`)",
    "SCF1001",
    (
        "    with torch.no_grad():\n        for data, target in test_loader:",
        "    if True:\n        for data, target in test_loader:",
    ),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "StepLR stepped per batch",
    "SCF701",
    (
        "def train(args, model, device, train_loader, optimizer, epoch):",
        "def train(args, model, device, train_loader, optimizer, epoch, scheduler):",
    ),
    (
        "        optimizer.step()\n        if batch_idx",
        "        optimizer.step()\n        scheduler.step()\n        if batch_idx",
    ),
    (
        "        train(args, model, device, train_loader, optimizer, epoch)",
        "        train(args, model, device, train_loader, optimizer, epoch, scheduler)",
    ),
    (
        "        test(model, device, test_loader)\n        scheduler.step()\n",
        "        test(model, device, test_loader)\n",
    ),
    scope=MNIST_SCOPE,
)
inject(
    EX,
    MNIST,
    "training loss summed as a tensor",
    "SCF1101",
    ("    model.train()\n    for batch_idx", "    model.train()\n    total = 0\n    for batch_idx"),
    ("        loss.backward()\n", "        loss.backward()\n        total += loss\n"),
    scope=MNIST_SCOPE,
)

# pytorch/examples imagenet: DistributedSampler, AverageMeter, run_validate helper, StepLR.
inject(
    EX,
    IMNET,
    "zero_grad removed",
    "SCF202",
    ("        optimizer.zero_grad()\n        loss.backward()", "        loss.backward()"),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "zero_grad between backward and step",
    "SCF201",
    (
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()",
        "        loss.backward()\n        optimizer.zero_grad()\n        optimizer.step()",
    ),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "model.train() removed",
    "SCF901",
    ("    # switch to train mode\n    model.train()\n", ""),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "model.eval() removed",
    "SCF1002",
    ("    # switch to evaluate mode\n    model.eval()\n", ""),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "no_grad removed (its block kept as `if True:`)",
    "SCF1001",
    (
        "        with torch.no_grad():\n            end = time.time()",
        "        if True:\n            end = time.time()",
    ),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "set_epoch removed",
    "SCF1501",
    ("            train_sampler.set_epoch(epoch)", "            pass"),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "loss tensor given to the AverageMeter",
    "SCF1101",
    (
        "        losses.update(loss.item(), images.size(0))\n        top1.update(acc1[0], "
        "images.size(0))\n        top5.update(acc5[0], images.size(0))\n\n        # compute",
        "        losses.update(loss, images.size(0))\n        top1.update(acc1[0], "
        "images.size(0))\n        top5.update(acc5[0], images.size(0))\n\n        # compute",
    ),
    scope=IMNET_SCOPE,
)
inject(
    EX,
    IMNET,
    "clip before backward",
    "SCF401",
    (
        "        optimizer.zero_grad()\n        loss.backward()",
        "        optimizer.zero_grad()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
        "\n        loss.backward()",
    ),
    scope=IMNET_SCOPE,
)

# nanoGPT train.py: a module-level while loop, micro-step accumulation, GradScaler.
inject(
    NANO,
    "train.py",
    "zero_grad removed",
    "SCF202",
    ("    optimizer.zero_grad(set_to_none=True)\n", ""),
)
inject(
    NANO,
    "train.py",
    "unscale_ removed before clipping",
    "SCF501",
    ("        scaler.unscale_(optimizer)\n", ""),
)
inject(
    NANO,
    "train.py",
    "optimizer.step() instead of scaler.step()",
    "SCF502",
    ("    scaler.step(optimizer)\n", "    optimizer.step()\n"),
)
inject(NANO, "train.py", "scaler.update() removed", "SCF504", ("    scaler.update()\n", ""))
inject(
    NANO,
    "train.py",
    "accumulated loss not divided",
    "SCF1401",
    (
        "            loss = loss / gradient_accumulation_steps # scale the loss to account for "
        "gradient accumulation\n",
        "",
    ),
)
inject(
    NANO,
    "train.py",
    "@torch.no_grad() removed from estimate_loss",
    "SCF1001",
    ("@torch.no_grad()\ndef estimate_loss():", "def estimate_loss():"),
)
inject(
    NANO,
    "train.py",
    "backward inside autocast",
    "SCF601",
    (
        "        # backward pass, with gradient scaling if training in fp16\n"
        "        scaler.scale(loss).backward()\n",
        "",
    ),
    (
        "            loss = loss / gradient_accumulation_steps # scale the loss to account for "
        "gradient accumulation\n",
        "            loss = loss / gradient_accumulation_steps\n"
        "            scaler.scale(loss).backward()\n",
    ),
)

# DeiT engine.py + main.py: timm's NativeScaler, loss_scaler(loss, optimizer, clip_grad=...).
inject(
    DEIT,
    "engine.py",
    "zero_grad removed (NativeScaler)",
    "SCF202",
    ("        optimizer.zero_grad()\n\n        # this attribute", "\n        # this attribute"),
)
inject(
    DEIT,
    "engine.py",
    "clipping before the loss scaler's backward",
    "SCF401",
    (
        "        optimizer.zero_grad()\n\n        # this attribute",
        "        optimizer.zero_grad()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), "
        "max_norm)\n\n        # this attribute",
    ),
)
inject(
    DEIT,
    "engine.py",
    "clipping after the loss scaler's step",
    "SCF401",
    (
        "        torch.cuda.synchronize()\n        if model_ema",
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
        "        torch.cuda.synchronize()\n        if model_ema",
    ),
)
inject(
    DEIT,
    "engine.py",
    "model.train() removed (NativeScaler)",
    "SCF901",
    ("    model.train(set_training_mode)\n", ""),
)
inject(
    DEIT,
    "engine.py",
    "loss tensor given to the metric logger",
    "SCF1101",
    (
        "        metric_logger.update(loss=loss_value)\n        metric_logger.update(lr=",
        "        metric_logger.update(loss=loss)\n        metric_logger.update(lr=",
    ),
)
inject(
    DEIT,
    "engine.py",
    "epoch scheduler stepped per batch (NativeScaler)",
    "SCF701",
    (
        "def train_one_epoch(model: torch.nn.Module, criterion: DistillationLoss,",
        "def train_one_epoch(model: torch.nn.Module, criterion: DistillationLoss, sched,",
    ),
    (
        "        torch.cuda.synchronize()\n        if model_ema",
        "        sched.step()\n        torch.cuda.synchronize()\n        if model_ema",
    ),
    scope=("engine.py", "epoch_sched.py"),
)

# MAE engine_finetune.py + main_finetune.py: NativeScalerWithGradNormCount, accumulation.
inject(
    MAE,
    "engine_finetune.py",
    "accumulated loss not divided (loss scaler)",
    "SCF1401",
    ("        loss /= accum_iter\n", ""),
)
inject(
    MAE,
    "engine_finetune.py",
    "zero_grad removed (loss scaler)",
    "SCF202",
    ("        if (data_iter_step + 1) % accum_iter == 0:\n            optimizer.zero_grad()\n", ""),
)
inject(
    MAE,
    "engine_finetune.py",
    "model.train() removed (loss scaler)",
    "SCF901",
    ("    model.train(True)\n", ""),
)
inject(
    MAE,
    "engine_finetune.py",
    "clipping before the loss scaler's backward",
    "SCF401",
    (
        "        loss /= accum_iter\n",
        "        loss /= accum_iter\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
    ),
)
inject(
    MAE,
    "engine_finetune.py",
    "loss tensor given to the metric logger",
    "SCF1101",
    (
        "        metric_logger.update(loss=loss_value)\n        min_lr",
        "        metric_logger.update(loss=loss)\n        min_lr",
    ),
)


# Issue 27's rules, injected the same way: each in the style of a real script that accumulates
# gradients, keeps an EMA, compiles or warms up.
YOLO, ACC = "ultralytics+yolov5", "huggingface+accelerate"
inject(
    DEIT,
    "engine.py",
    "EMA updated before the loss scaler's step",
    "SCF302",
    (
        "        loss_scaler(loss, optimizer, clip_grad=max_norm,",
        "        if model_ema is not None:\n            model_ema.update(model)\n"
        "        loss_scaler(loss, optimizer, clip_grad=max_norm,",
    ),
)
inject(
    YOLO,
    "train.py",
    "EMA updated before the step (accumulation)",
    "SCF302",
    (
        "                scaler.step(optimizer)  # optimizer.step\n",
        "                if ema:\n                    ema.update(model)\n"
        "                scaler.step(optimizer)  # optimizer.step\n",
    ),
    scope=("train.py",),
)
inject(
    YOLO,
    "train.py",
    "zero_grad every micro-batch (accumulation)",
    "SCF1402",
    ("                optimizer.zero_grad()\n                if ema:", "                if ema:"),
    (
        "            # Forward\n            with smart_amp_autocast(amp):",
        "            # Forward\n            optimizer.zero_grad()\n"
        "            with smart_amp_autocast(amp):",
    ),
    scope=("train.py",),
)
inject(
    MAE,
    "engine_finetune.py",
    "zero_grad every micro-batch (loss scaler)",
    "SCF1402",
    (
        "        if (data_iter_step + 1) % accum_iter == 0:\n            optimizer.zero_grad()\n",
        "        optimizer.zero_grad()\n",
    ),
)
inject(
    MAE,
    "engine_finetune.py",
    "step every micro-batch (loss scaler)",
    "SCF1403",
    ("update_grad=(data_iter_step + 1) % accum_iter == 0)", "update_grad=True)"),
)
inject(
    NANO,
    "train.py",
    "zero_grad in the micro-step loop",
    "SCF1402",
    (
        "    for micro_step in range(gradient_accumulation_steps):\n",
        "    for micro_step in range(gradient_accumulation_steps):\n"
        "        optimizer.zero_grad(set_to_none=True)\n",
    ),
)
inject(
    ACC,
    "examples/nlp_example.py",
    "step every micro-batch (accumulation)",
    "SCF1403",
    (
        "            if step % gradient_accumulation_steps == 0:\n                optimizer.step()\n"
        "                lr_scheduler.step()\n",
        "            optimizer.step()\n            if step % gradient_accumulation_steps == 0:\n"
        "                lr_scheduler.step()\n",
    ),
    scope=("examples/nlp_example.py",),
)
inject(
    ACC,
    "examples/nlp_example.py",
    "warm-up schedule stepped per epoch",
    "SCF703",
    ("                lr_scheduler.step()\n", ""),
    (
        "        model.eval()\n        for step, batch in enumerate(eval_dataloader):",
        "        lr_scheduler.step()\n        model.eval()\n"
        "        for step, batch in enumerate(eval_dataloader):",
    ),
    scope=("examples/nlp_example.py",),
)
inject(
    EX,
    IMNET,
    "compiled model's state dict saved",
    "SCF2401",
    (
        "    else:\n        model.to(device)\n",
        "    else:\n        model.to(device)\n    if args.compile:\n        model = torch.compile(model)\n",
    ),
    scope=IMNET_SCOPE,
)


# --- running ---


@dataclass
class Row:
    repo: str
    path: str
    line: int
    code: str
    text: str
    verdict: str
    why: str


def python_lines(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*.py"):
        try:
            total += path.read_bytes().count(b"\n")
        except OSError:
            pass
    return total


def check_repo(folder: Path, scope=()) -> tuple:
    """(findings, problems, notes, seconds) of one run over a repository."""
    targets = [str(folder / s) for s in scope] if scope else [str(folder)]
    # CPU time of this process: the machine is shared, and wall time moves with its load
    start = time.process_time()
    result = check_paths(targets)
    seconds = time.process_time() - start
    return result.findings, result.problems, getattr(result, "notes", []), seconds


def line_text(path: str, line: int) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()[line - 1]
    except (OSError, IndexError):
        return ""


def findings_rows(trees: Path, repos: list) -> tuple:
    rows, problems, timing = [], [], []
    for repo in repos:
        folder = trees / repo
        findings, found_problems, _, seconds = check_repo(folder)
        lines = python_lines(folder)
        timing.append((repo, lines, seconds))
        problems += [p for p in found_problems if "internal error" in p]
        for f in findings:
            rel = os.path.relpath(f.path, folder)
            text = line_text(f.path, f.line)
            judged, why = VERDICTS.get((repo, rel, f.code, text.strip()), ("unjudged", ""))
            rows.append(Row(repo, rel, f.line, f.code, text.strip(), judged, why))
    return rows, problems, timing


def run_injection(trees: Path, inj: Injection) -> tuple:
    """(caught, the new findings) for one injected bug, in a copy of its repository."""
    source = trees / inj.repo
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / inj.repo
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.png", "*.jpg", ".git"))
        before = _keys(copy, inj.scope)
        target = copy / inj.path
        changed = target.read_text()
        for old, new in inj.edits:
            if changed.count(old) != 1:
                count = changed.count(old)
                raise SystemExit(f"injection {inj.bug!r}: {inj.path} has {old!r} {count}x")
            changed = changed.replace(old, new)
        ast.parse(changed)
        target.write_text(changed)
        if inj.repo == DEIT and "sched" in changed:
            # DeiT steps a timm scheduler with the epoch (idempotent); the classic bug is a
            # torch epoch scheduler handed to the batch loop, as a caller would write it:
            (copy / "epoch_sched.py").write_text(EPOCH_SCHED)
        after = _keys(copy, inj.scope)
    new = sorted(after - before)
    return any(code in inj.codes for _, code, _ in new), new


EPOCH_SCHED = """import torch
from engine import train_one_epoch


def fit(model, criterion, loader, optimizer, device, loss_scaler, epochs, args):
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    for epoch in range(epochs):
        train_one_epoch(model, criterion, sched, loader, optimizer, device, epoch, loss_scaler,
                        args=args)
"""


def _keys(folder: Path, scope) -> set:
    findings, *_ = check_repo(folder, scope)
    return {
        (os.path.relpath(f.path, folder), f.code, line_text(f.path, f.line).strip())
        for f in findings
        if f.code != LOAD
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", type=Path)
    parser.add_argument("--repos", help="comma-separated subfolders (default: every one)")
    parser.add_argument("--inject", action="store_true", help="also measure recall")
    parser.add_argument("--markdown", type=Path, help="write the tables to this file")
    args = parser.parse_args(argv)
    repos = (
        args.repos.split(",")
        if args.repos
        else sorted(p.name for p in args.trees.iterdir() if p.is_dir())
    )
    rows, problems, timing = findings_rows(args.trees, repos)
    loop = [r for r in rows if r.code != LOAD]
    for r in rows:
        print(f"{r.verdict:10} {r.repo}/{r.path}:{r.line} {r.code}  {r.text[:70]}  -- {r.why}")
    good = sum(r.verdict in (T, D) for r in loop)
    counts = {v: sum(r.verdict == v for r in loop) for v in (T, D, F, "unjudged")}
    precision = good / len(loop) if loop else 1.0
    lines = sum(n for _, n, _ in timing)
    seconds = sum(s for _, _, s in timing)
    print(f"\nloop-rule findings: {len(loop)} {counts}; precision {precision:.0%}")
    print(f"SCF2301 findings: {len(rows) - len(loop)}")
    print(f"internal errors: {len(problems)}")
    for p in problems:
        print("  ", p)
    print(f"{lines} lines in {seconds:.1f} s: {seconds / lines * 1e5:.2f} s per 100k lines")
    results = []
    if args.inject:
        for inj in INJECTIONS:
            if inj.repo not in repos:
                continue
            caught, new = run_injection(args.trees, inj)
            results.append((inj, caught, new))
            print(
                f"{'caught' if caught else 'MISSED'}  {inj.repo}/{inj.path}: {inj.bug}"
                f"  {sorted({c for _, c, _ in new})}"
            )
        found = sum(c for _, c, _ in results)
        print(f"\nrecall: {found}/{len(results)} = {found / max(len(results), 1):.0%}")
    if args.markdown:
        args.markdown.write_text(markdown(rows, counts, precision, problems, timing, results))
    return 0


def markdown(rows, counts, precision, problems, timing, results) -> str:
    loop = [r for r in rows if r.code != LOAD]
    lines = sum(n for _, n, _ in timing)
    seconds = sum(s for _, _, s in timing)
    out = [
        "# `scaffold check` on real repositories",
        "",
        f"Made {datetime.date.today().isoformat()} by `python benchmarks/check_corpus.py TREES "
        "--inject --markdown benchmarks/results/check_corpus.md` (TREES: the repositories below, "
        "fetched; how to make it is in the script's docstring).",
        "",
        f"- loop-rule findings: {len(loop)}: {counts[T]} true, {counts[D]} debatable, "
        f"{counts[F]} false, {counts['unjudged']} unjudged; **precision "
        f"{precision:.0%}** (true or debatable over all)",
        f"- `torch.load` without `weights_only` (SCF2301): {len(rows) - len(loop)}",
        f"- internal errors: {len(problems)}",
        f"- speed: {lines:,} lines in {seconds:.1f} s, {seconds / lines * 1e5:.2f} s per 100k "
        "lines (CPU time of the checking process, 2-core machine)",
    ]
    if results:
        found = sum(c for _, c, _ in results)
        out.append(
            f"- injected bugs caught: **{found}/{len(results)} = {found / len(results):.0%}**"
        )
    out += ["", "## Repositories", "", "| repository | lines | seconds |", "|---|---|---|"]
    out += [f"| {r} | {n:,} | {s:.1f} |" for r, n, s in timing]
    out += [
        "",
        "## Every loop-rule finding",
        "",
        "| finding | code | line | verdict | why |",
        "|---|---|---|---|---|",
    ]
    for r in loop:
        text = r.text.replace("|", "\\|")[:80]
        out.append(f"| {r.repo}/{r.path}:{r.line} | {r.code} | `{text}` | {r.verdict} | {r.why} |")
    if results:
        out += [
            "",
            "## Injected bugs",
            "",
            "| script | bug | expected | caught | new findings |",
            "|---|---|---|---|---|",
        ]
        for inj, caught, new in results:
            got = ", ".join(sorted({c for _, c, _ in new})) or "none"
            out.append(
                f"| {inj.repo}/{inj.path} | {inj.bug} | {'/'.join(inj.codes)} | "
                f"{'yes' if caught else 'no'} | {got} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
