"""Words and their ids: a vocabulary built from the training documents only."""

import re
from collections import Counter
from collections.abc import Iterable

PAD, UNK = 0, 1  # id 0 pads a batch (the model masks it out); id 1 stands for unknown words
# A word (letters and digits in any script, with an inner apostrophe: "don't"), or one mark
# of punctuation, which carries meaning in text ("!", "?", ":)").
TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """The lower-cased words and punctuation marks of a text, in order."""
    return TOKEN.findall(text.lower())


class Vocabulary:
    """The words a model knows, most frequent first, after <pad> and <unk>.

    Built from the training split only: a vocabulary that has seen the validation documents
    leaks them into training (words only they contain would get ids instead of <unk>).
    """

    def __init__(self, words: list[str]) -> None:
        self.words = list(words)
        self.ids = {word: i for i, word in enumerate(self.words)}

    @classmethod
    def build(cls, documents: Iterable[str], max_size: int, min_freq: int) -> "Vocabulary":
        counts = Counter(word for document in documents for word in tokenize(document))
        frequent = [word for word, count in counts.items() if count >= min_freq]
        # Most frequent first; ties in alphabetical order, so the ids never depend on set order.
        frequent.sort(key=lambda word: (-counts[word], word))
        return cls(["<pad>", "<unk>", *frequent[: max_size - 2]])

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str, max_length: int) -> list[int]:
        """The ids of a text's first max_length tokens; an empty text is one <unk>, so every
        document has a token for the model to read."""
        get = self.ids.get
        return [get(word, UNK) for word in tokenize(text)[:max_length]] or [UNK]

    def state_dict(self) -> dict:
        return {"words": self.words}
