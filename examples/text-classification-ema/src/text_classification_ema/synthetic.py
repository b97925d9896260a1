"""Built-in synthetic documents whose class depends on word order, not only on which words occur."""

import random

POSITIVE = ["good", "great", "fine", "superb"]
NEGATIVE = ["bad", "awful", "poor", "dull"]
INTENSIFIERS = ["very", "really", "quite"]
CLASSES = ["alpha-negative", "alpha-positive", "beta-negative", "beta-positive"]
_SYLLABLES = ["ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "pe", "do", "ga", "zu"]


def _filler_words(count: int = 400) -> list[str]:
    rng = random.Random(1234)  # the same made-up words for every seed
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def make_documents(count: int, seed: int, hint: float = 0.5) -> tuple[list[str], list[int]]:
    """count documents and their classes (indices into CLASSES), all drawn from seed.

    A class is two bits, both carried by word order. Polarity: one sentiment word, negated half
    of the time by a "not" just before it (perhaps with "very" between), so that the word alone
    says nothing. Order: "alpha" and "beta" both occur, a few words apart; which comes first is
    the bit. Half of the documents also hold a keyword of their class, the part a bag of words
    can learn; a stray "not" elsewhere and Zipf-distributed filler words make the rest noisy.
    """
    rng = random.Random(seed)
    filler = _filler_words()
    weights = [1 / (rank + 1) for rank in range(len(filler))]
    documents, labels = [], []
    for _ in range(count):
        positive, negated, beta_first = (rng.random() < 0.5 for _ in range(3))
        label = 2 * beta_first + (positive != negated)
        sentiment = [rng.choice(POSITIVE if positive else NEGATIVE)]
        if negated:
            sentiment = ["not", *rng.sample(INTENSIFIERS, rng.randint(0, 1)), *sentiment]
        gap = rng.choices(filler, weights, k=rng.randint(0, 2))
        order = ["beta", *gap, "alpha"] if beta_first else ["alpha", *gap, "beta"]
        phrases = [sentiment, order]
        if rng.random() < hint:
            phrases.append([f"topic{label}"])
        if rng.random() < 0.3:
            phrases.append(["not"])
        words = [[word] for word in rng.choices(filler, weights, k=rng.randint(8, 40))]
        for phrase in phrases:  # each phrase whole, at a random place
            words.insert(rng.randint(0, len(words)), phrase)
        documents.append(" ".join(word for phrase in words for word in phrase))
        labels.append(label)
    return documents, labels
