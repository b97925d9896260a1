"""Item 2: train time and encode speed of HF `tokenizers` (BPE, WordPiece) vs a regex vocabulary."""

import time

import torch
from common import HFVocab, WordVocab, load_rotten_tomatoes, split

torch.set_num_threads(1)
docs, labels, _ = load_rotten_tomatoes()
tr, _ = split(len(docs), 0)
train_docs = [docs[i] for i in tr]
sample = train_docs[:5000]
n_words = sum(len(d.split()) for d in train_docs)


def best_of(fn, reps=3):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


print(f"train split: {len(train_docs)} docs, {n_words} whitespace words; fit on first 5000 docs")
rows = [("regex words min_freq 2", lambda: WordVocab(sample, max_size=20000, min_freq=2))]
for kind in ["bpe", "wordpiece"]:
    for size in [2000, 4000, 8000]:
        build = lambda k=kind, s=size: HFVocab(sample, vocab_size=s, kind=k)  # noqa: E731
        rows.append((f"{kind} {size}", build))
for name, build in rows:
    fit_s, vocab = best_of(build)
    enc_s, ids = best_of(lambda v=vocab: v.encode_batch(train_docs))
    n_tok = sum(map(len, ids))
    unk = sum(s.count(1) for s in ids) / n_tok
    print(
        f"{name:24s} vocab {len(vocab):5d} | fit {fit_s * 1000:6.0f} ms | "
        f"encode {len(train_docs)} docs {enc_s * 1000:5.0f} ms "
        f"({n_words / enc_s / 1e6:.2f} M words/s) | "
        f"{n_tok / len(train_docs):.1f} tokens/doc, unk {unk:.2%}"
    )
