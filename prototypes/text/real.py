"""Item 4: TF-IDF + logistic regression vs a small torch model on Rotten Tomatoes, seeds 0-2."""

import argparse
import statistics
import time

import torch
from common import HFVocab, WordVocab, load_rotten_tomatoes, make_model, split, train_eval
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

p = argparse.ArgumentParser()
p.add_argument("--model", default="cnn", choices=["cnn", "transformer"])
p.add_argument("--tok", default="word", choices=["word", "wordpiece", "bpe"])
p.add_argument("--vocab", type=int, default=20000)
p.add_argument("--epochs", type=int, default=6)
p.add_argument("--lr", type=float, default=5e-3)
p.add_argument("--wd", type=float, default=0.0)
p.add_argument("--dim", type=int, default=64, help="embedding/model width")
p.add_argument("--layers", type=int, default=1)
p.add_argument("--kw", default="dropout=0.3,channels=64", help="extra model kwargs: k=v,k=v")
p.add_argument("--seeds", default="0,1,2")
p.add_argument("--no-baseline", action="store_true")
p.add_argument("-v", action="store_true")
a = p.parse_args()
torch.set_num_threads(1)

docs, labels, classes = load_rotten_tomatoes()
rows = []
for seed in map(int, a.seeds.split(",")):
    tr, va = split(len(docs), seed)
    trd, vad = [docs[i] for i in tr], [docs[i] for i in va]
    try_, vay = [labels[i] for i in tr], [labels[i] for i in va]
    base, tb = float("nan"), 0.0
    if not a.no_baseline:
        t = time.perf_counter()
        vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        clf = LogisticRegression(C=4.0, max_iter=2000).fit(vec.fit_transform(trd), try_)
        base = clf.score(vec.transform(vad), vay)
        tb = time.perf_counter() - t
    t = time.perf_counter()
    if a.tok == "word":
        vocab = WordVocab(trd, max_size=a.vocab, min_freq=2)
    else:
        vocab = HFVocab(trd, vocab_size=a.vocab, kind=a.tok)
    tr_ids, va_ids = vocab.encode_batch(trd), vocab.encode_batch(vad)
    tv = time.perf_counter() - t
    kw = {}
    if a.dim:
        kw["dim"] = a.dim
    if a.model == "transformer":
        kw["layers"] = a.layers
    for item in filter(None, a.kw.split(",")):
        k, v = item.split("=")
        kw[k] = float(v) if "." in v else int(v)
    torch.manual_seed(seed)
    model = make_model(a.model, len(vocab), len(classes), **kw)
    acc, curve, tm = train_eval(
        model,
        tr_ids,
        try_,
        va_ids,
        vay,
        epochs=a.epochs,
        seed=seed,
        lr=a.lr,
        weight_decay=a.wd,
        log=print if a.v else None,
    )
    rows.append((base, acc))
    n_params = sum(q.numel() for q in model.parameters())
    print(
        f"seed {seed}: tfidf+LR {base:.4f} ({tb:.1f} s) | {a.model}/{a.tok} vocab {len(vocab)} "
        f"{acc:.4f} (tok {tv:.1f} s, train {tm:.1f} s, {n_params} params) "
        f"curve {' '.join(f'{c:.3f}' for c in curve)}"
    )
b, m = zip(*rows, strict=True)
print(
    f"mean: tfidf+LR {statistics.fmean(b):.4f} | model {statistics.fmean(m):.4f} | "
    f"gap {100 * (statistics.fmean(m) - statistics.fmean(b)):+.2f} points"
)
