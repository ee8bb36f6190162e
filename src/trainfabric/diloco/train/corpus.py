"""A generated English-like text corpus (no downloads, nothing shipped) and byte tokenizer.

The corpus is drawn from a small probabilistic grammar with real structure a model can learn:
agreement between subject and verb number, a fixed vocabulary of ~150 words, and arithmetic
facts (``17 plus 25 is 42.``) whose answers are determined by the question. Training text
and held-out text come from independent streams of the same grammar (different seeds), so
the eval loss measures generalisation, not memorisation. Tokens are bytes (vocabulary 256).
"""

from __future__ import annotations

import random

import numpy as np

ADJ = [
    "small",
    "large",
    "quiet",
    "busy",
    "red",
    "green",
    "old",
    "new",
    "bright",
    "dark",
    "warm",
    "cold",
    "slow",
    "quick",
    "tall",
    "short",
    "clever",
    "gentle",
    "noisy",
    "careful",
]
NOUN_S = [
    "cat",
    "dog",
    "bird",
    "teacher",
    "farmer",
    "river",
    "engine",
    "student",
    "doctor",
    "child",
    "robot",
    "sailor",
    "baker",
    "painter",
    "miner",
    "pilot",
]
NOUN_P = [n + ("es" if n.endswith(("s", "sh", "ch")) else "s") for n in NOUN_S]
VERB_S = [
    "sees",
    "likes",
    "follows",
    "helps",
    "finds",
    "watches",
    "carries",
    "builds",
    "paints",
    "visits",
]
VERB_P = ["see", "like", "follow", "help", "find", "watch", "carry", "build", "paint", "visit"]
PLACE = [
    "the market",
    "the hill",
    "the old bridge",
    "the school",
    "the harbour",
    "the forest",
    "the station",
    "the garden",
    "the village",
    "the mill",
]
PREP = ["near", "behind", "under", "beside", "across"]
TIME = ["in the morning", "at night", "after lunch", "before the storm", "every day"]


def _noun_phrase(rng: random.Random, plural: bool) -> str:
    noun = rng.choice(NOUN_P if plural else NOUN_S)
    if rng.random() < 0.6:
        return f"the {rng.choice(ADJ)} {noun}"
    return f"the {noun}"


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        a, b = rng.randrange(50), rng.randrange(50)
        if rng.random() < 0.5:
            return f"{a} plus {b} is {a + b}."
        a, b = max(a, b), min(a, b)
        return f"{a} minus {b} is {a - b}."
    plural = rng.random() < 0.5
    subj = _noun_phrase(rng, plural)
    verb = rng.choice(VERB_P if plural else VERB_S)
    obj = _noun_phrase(rng, rng.random() < 0.5)
    s = f"{subj} {verb} {obj}"
    if rng.random() < 0.5:
        s += f" {rng.choice(PREP)} {rng.choice(PLACE)}"
    if rng.random() < 0.3:
        s += f" {rng.choice(TIME)}"
    return s[0].upper() + s[1:] + "."


def generate(n_bytes: int, seed: int) -> bytes:
    """At least ``n_bytes`` bytes of corpus text from the grammar, deterministic in ``seed``
    (sentences separated by spaces, a newline every 8 sentences), cut to ``n_bytes``."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        line = " ".join(_sentence(rng) for _ in range(8)) + "\n"
        parts.append(line)
        size += len(line)
    return "".join(parts).encode("ascii")[:n_bytes]


def tokens(n_bytes: int, seed: int) -> np.ndarray:
    """The corpus as a uint8 token array (byte-level tokenizer: token = byte value)."""
    return np.frombuffer(generate(n_bytes, seed), dtype=np.uint8).copy()


TRAIN_SEED = 20261204
HELDOUT_SEED = 7_777_777
