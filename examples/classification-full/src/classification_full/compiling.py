"""torch.compile for the training and validation passes (K1, K2 and C4 in the README).

The compiled module shares its parameters and buffers with the model it wraps: the optimizer
and every checkpoint work on the model itself, and only the forward passes go through the
compiled code. A compiled module's state dict names every key
`_orig_mod.<name>`, which a plain model does not load: checkpoints save the model's own (C4).
"""

import os

import torch
import torch._inductor.config
from torch import nn

from .config import ConfigError

# K2: how the compiled code meets batches of other sizes (the last, smaller batch of an epoch,
# the validation batches). None is torch's default: the first graph is built for the first
# batch's shapes, and a batch of another size recompiles once, into a graph whose batch
# dimension is symbolic, which then serves every size. Graphs compiled in 2 epochs
# of 800 training and 200 validation samples, batch 64, CPU, torch 2.13, with None / True /
# False: tabular 3 / 2 / 3 (the last batch, validation); image 2 / 2 / 2 (it drops its small
# last batch), compiling in 71 / 106 / 59 s (the symbolic CNN compiles slower); text 5 / 4 / 5
# with its batches padded to powers of two, 8 and torch's limit hit with each batch padded to
# its own longest (the convolutions' backward is built for one length, whatever `dynamic`
# says). False would compile a graph for every batch size it meets; True makes every kernel
# symbolic, slower to compile, for one graph saved.
DYNAMIC = None
# K2: graphs one model may compile before torch gives up on it; torch's default is 8. Each
# input shape past the batch dimension is a graph for training and one for validation. Past
# the limit torch would run the model eager from then on with one warning; here it raises.
RECOMPILE_LIMIT = 32


def require_compiler(device: torch.device) -> None:
    """Refuse, in one line, compiled training on the CPU without a C++ compiler.

    On the CPU inductor writes C++ and builds it with g++ (or $CXX) at the first step; without
    one, torch fails there with a long traceback from deep inside its compiler. Refused rather
    than trained eager: compile = true asks for compiled steps, and falling back would change
    the run's speed (and its rounding, K1) without a word; compile = false trains eager.
    """
    if device.type != "cpu":
        return  # CUDA's kernels are Triton's, built by its own toolchain
    try:  # torch's private helpers: the search inductor itself makes, from the same settings
        from torch._inductor.cpp_builder import get_cpp_compiler
        from torch._inductor.exc import InvalidCxxCompiler
    except ImportError:  # another torch version: it reports a missing compiler itself
        return
    try:
        get_cpp_compiler()
    except InvalidCxxCompiler:
        cxx = os.environ.get("CXX", "g++")
        raise ConfigError(
            f"compile = true needs a C++ compiler on the CPU and {cxx!r} was not found; install "
            "g++ (or point CXX at a C++ compiler), or set compile=false to train eager"
        ) from None


def compile_model(model: nn.Module) -> nn.Module:
    """The model's forward pass, compiled on its first call; shares the model's parameters."""
    config = torch._dynamo.config  # settings of the whole process, which this run owns
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.fail_on_recompile_limit_hit = True  # K2: a storm stops the run, never hides
    # K1: random ops (dropout) draw from torch's generator as eager ones do, not from the
    # compiled code's own: the same seed then gives the same dropout masks compiled or eager
    # (so the two runs agree to rounding), and a resumed run continues the same stream (S5).
    torch._inductor.config.fallback_random = True
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if on_cpu and not torch.are_deterministic_algorithms_enabled():
        # An embedding's backward adds gradient rows by index (a scatter-add). Compiled for the
        # CPU by torch 2.13 outside deterministic mode, its threads corrupted memory in every
        # run measured with 2 threads ("corrupted size vs. prev_size", then SIGABRT); with 1
        # thread, in deterministic mode (the default) or run eager it is sound. So with
        # deterministic=false on the CPU, embeddings run eager, outside the compiled graphs.
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                module.forward = torch.compiler.disable(module.forward)
    return torch.compile(model, dynamic=DYNAMIC)
