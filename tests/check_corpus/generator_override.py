"""fairseq's style: a generator's public generate() is decorated @torch.no_grad() in the base
class and calls self._generate(), which a subclass overrides with its decoding loop. Issue 25,
2026-12-04."""

import torch


class SequenceGenerator:
    def __init__(self, model, max_len=200):
        self.model = model
        self.max_len = max_len
        self.model.eval()

    @torch.no_grad()
    def generate(self, tokens):
        return self._generate(tokens)

    def _generate(self, tokens):
        return self.model(tokens).argmax(-1)


class GreedyGenerator(SequenceGenerator):
    def __init__(self, model, max_len=200, eos=2):
        super().__init__(model, max_len)
        self.eos = eos
        self.model.eval()

    def _generate(self, tokens):
        for _ in range(self.max_len):
            logits = self.model(tokens)
            tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)
        return tokens
