"""Item 5: padding fraction and steps/s of length-bucketed vs random batches; padding invariance."""

import random
import statistics
import time

import torch
from common import WordVocab, batch_order, load_rotten_tomatoes, make_model, pad_batch, split
from torch import nn

torch.set_num_threads(1)


def pad_fraction(lengths, batches):
    real = sum(lengths[i] for b in batches for i in b)
    total = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - real / total


def steps_per_s(model, seqs, batches, max_len, n=60):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    y = torch.zeros(len(seqs), dtype=torch.long)
    t = time.perf_counter()
    for b in batches[:n]:
        ids, mask = pad_batch([seqs[i] for i in b], max_len)
        loss = nn.functional.cross_entropy(model(ids, mask), y[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return min(n, len(batches)) / (time.perf_counter() - t)


def compare(label, seqs, max_len, vocab_size, reps=3, steps=40):
    lengths = [min(len(s), max_len) for s in seqs]
    for name in ["cnn", "transformer"]:
        ratios, pads = [], {}
        for rep in range(reps):
            speed = {}
            for chunk in [0, 50]:  # interleaved so drift hits both alike
                batches = batch_order(lengths, 64, random.Random(rep), chunk)
                pads[chunk] = pad_fraction(lengths, batches)
                torch.manual_seed(0)
                kw = dict(max_len=max_len) if name == "transformer" else {}
                speed[chunk] = steps_per_s(
                    make_model(name, vocab_size, 2, **kw), seqs, batches, max_len, steps
                )
            ratios.append(speed[50] / speed[0])
        print(
            f"{label} {name:11s}: padding random {pads[0]:.1%} -> bucketed {pads[50]:.1%}; "
            f"steps/s bucketed/random {statistics.median(ratios):.2f} "
            f"(reps {' '.join(f'{r:.2f}' for r in ratios)})"
        )


docs, labels, _ = load_rotten_tomatoes()
tr, _ = split(len(docs), 0)
vocab = WordVocab([docs[i] for i in tr])
seqs = vocab.encode_batch([docs[i] for i in tr])
compare("rotten tomatoes (max 256)", seqs, 256, len(vocab))
# a review-like long-tail distribution (IMDB-ish: median ~175 words, long right tail)
g = random.Random(0)
long_seqs = [
    [g.randrange(2, 5000) for _ in range(max(5, int(g.lognormvariate(5.2, 0.75))))]
    for _ in range(1500)
]
print(
    "lognormal lengths: median",
    statistics.median(map(len, long_seqs)),
    "p99",
    sorted(map(len, long_seqs))[int(0.99 * 1500)],
)
compare("lognormal       (max 512)", long_seqs, 512, 5000, reps=1, steps=12)

# padding invariance: the same documents padded to their own length and to +40 pad columns
print("padding invariance (max |logit difference|, eval mode and train mode without dropout):")
batch = [seqs[i] for i in range(16)]
for name in ["cnn", "transformer"]:
    torch.manual_seed(0)
    model = make_model(name, len(vocab), 2, dropout=0.0).double()
    ids, mask = pad_batch(batch, 256)
    wide = torch.cat([ids, torch.zeros(ids.shape[0], 40, dtype=torch.long)], 1)
    for mode in ["eval", "train"]:
        model.train(mode == "train")
        a, b = model(ids, mask), model(wide, wide != 0)
        single = torch.cat([model(*pad_batch([s], 256)) for s in batch])
        grads = []
        for x in [(ids, mask), (wide, wide != 0)]:
            model.zero_grad()
            nn.functional.cross_entropy(model(*x), torch.ones(16, dtype=torch.long)).backward()
            grads.append(
                torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            )
        print(
            f"  {name:11s} {mode}: batch vs +40 pad {float((a - b).abs().max().detach()):.1e}, "
            f"batch vs one-by-one {float((a - single).abs().max().detach()):.1e}, "
            f"grads {float((grads[0] - grads[1]).abs().max()):.1e}"
        )
    model.float().eval()
    a, b = model(ids, mask), model(wide, wide != 0)
    print(f"  {name:11s} float32 eval: batch vs +40 pad {float((a - b).abs().max().detach()):.1e}")
