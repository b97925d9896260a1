"""Item 3: seeded synthetic documents whose class needs word order; BoW LR vs small torch models."""

import argparse
import random

import torch
from common import WordVocab, make_model, train_eval
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

POSITIVE = ["good", "great", "fine", "superb"]
NEGATIVE = ["bad", "awful", "poor", "dull"]
INTENSIFIERS = ["very", "really", "quite"]


def filler_words(rng: random.Random, n: int = 400) -> list[str]:
    syllables = ["ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "pe", "do", "ga", "zu"]
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))))
    return sorted(out)


def make_documents(n: int, seed: int, hint_prob: float = 0.5) -> tuple[list[str], list[int]]:
    """Four classes = 2 * order + polarity.

    polarity: one sentiment word, negated half of the time by a `not` just before it (an
    intensifier may sit between); the class uses the negated meaning, so single words carry
    no information about it. order: `alpha` and `beta` both occur, 0-2 words apart; which comes
    first is the bit. With probability `hint_prob` a class keyword `topicK` is added too: the
    part a bag of words can get. Filler words follow a Zipf law; a stray `not` is added
    elsewhere to 30% of the documents.
    """
    rng = random.Random(seed)
    vocab = filler_words(random.Random(1234))  # the same filler vocabulary for every seed
    weights = [1 / (r + 1) for r in range(len(vocab))]
    docs, labels = [], []
    for _ in range(n):
        positive, negated, alpha_first = (rng.random() < 0.5 for _ in range(3))
        label = 2 * alpha_first + (positive != negated)
        sentiment = [rng.choice(POSITIVE if positive else NEGATIVE)]
        if negated:
            sentiment = ["not"] + rng.sample(INTENSIFIERS, rng.randint(0, 1)) + sentiment
        gap = rng.choices(vocab, weights, k=rng.randint(0, 2))
        order = ["alpha", *gap, "beta"] if alpha_first else ["beta", *gap, "alpha"]
        units = [sentiment, order]
        if rng.random() < hint_prob:
            units.append([f"topic{label}"])
        if rng.random() < 0.3:
            units.append(["not"])
        words = [[w] for w in rng.choices(vocab, weights, k=rng.randint(8, 40))]
        for unit in units:  # insert each phrase whole at a random place
            words.insert(rng.randint(0, len(words)), unit)
        docs.append(" ".join(w for unit in words for w in unit))
        labels.append(label)
    return docs, labels


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--val", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--hint", type=float, default=0.5)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--tlr", type=float, default=2e-3, help="transformer learning rate")
    p.add_argument("--tepochs", type=int, default=6)
    a = p.parse_args()
    torch.set_num_threads(1)
    for seed in map(int, a.seeds.split(",")):
        docs, y = make_documents(a.train + a.val, seed, a.hint)
        trd, vad, ytr, yva = docs[: a.train], docs[a.train :], y[: a.train], y[a.train :]
        if seed == 0:
            print("example:", y[0], "|", docs[0])
        res = {}
        for name, ngrams in [("bow-1", (1, 1)), ("bow-1,2", (1, 2))]:
            vec = CountVectorizer(ngram_range=ngrams, token_pattern=r"\S+")
            clf = LogisticRegression(C=1.0, max_iter=3000).fit(vec.fit_transform(trd), ytr)
            res[name] = (clf.score(vec.transform(vad), yva), 0.0)
        vocab = WordVocab(trd, max_size=5000, min_freq=2)
        tr_ids, va_ids = vocab.encode_batch(trd), vocab.encode_batch(vad)
        for name, kw, lr, ep in [
            ("cnn", dict(dim=64, channels=64, dropout=0.1), 5e-3, a.epochs),
            ("transformer", dict(dim=64, layers=2, dropout=0.0), a.tlr, a.tepochs),
        ]:
            torch.manual_seed(seed)
            model = make_model(name, len(vocab), 4, **kw)
            acc, _, secs = train_eval(model, tr_ids, ytr, va_ids, yva, epochs=ep, seed=seed, lr=lr)
            res[name] = (acc, secs)
        print(
            f"seed {seed}: "
            + " | ".join(
                f"{k} {v:.3f}" + (f" ({s:.1f} s)" if s else "") for k, (v, s) in res.items()
            )
        )
