"""open_clip's style: the step (backward, clipping, update) is a closure a factory returns,
torch.compile'd or not; the epoch loop zeroes the gradients before each call of the returned
step, outside the compiled code. Issue 25, 2026-12-04."""

import torch


def make_train_step(model, optimizer, clip):
    params = tuple(model.parameters())

    def train_step(images, labels):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        return loss.detach()

    return train_step


def get_compiled_train_step(state, clip):
    if state.compiled is not None:
        return state.compiled
    compiled = torch.compile(make_train_step(state.model, state.optimizer, clip))
    state.compiled = compiled
    return state.compiled


def train_one_epoch(state, loader, clip, compile_step):
    state.model.train()
    if compile_step:
        train_step = get_compiled_train_step(state, clip)
    else:
        train_step = make_train_step(state.model, state.optimizer, clip)
    total = 0.0
    for images, labels in loader:
        state.optimizer.zero_grad()
        total += train_step(images, labels).item()
    return total / len(loader)


def main(state, loader, epochs):
    torch.manual_seed(0)
    for _ in range(epochs):
        print(train_one_epoch(state, loader, clip=1.0, compile_step=True))
