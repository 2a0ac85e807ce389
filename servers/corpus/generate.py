"""Generate the /search corpus: servers/corpus/sentences.tsv (TYPE<TAB>SENTENCE, TYPE 1..4).

Deterministic (seeded), so every server and every test sees the same corpus:
    python servers/corpus/generate.py [--sentences 20000] [--seed 7]
"""

import argparse
import random
from pathlib import Path

SUBJECTS = [
    "the server",
    "a client",
    "the kernel",
    "our queue",
    "the scheduler",
    "a worker",
    "the proxy",
    "the cache",
    "a thread",
    "the socket",
    "the router",
    "a request",
]
VERBS = [
    "accepts",
    "drops",
    "forwards",
    "delays",
    "retries",
    "measures",
    "spins",
    "blocks",
    "answers",
    "parses",
    "buffers",
    "counts",
]
OBJECTS = [
    "packets",
    "connections",
    "bytes",
    "latencies",
    "timeouts",
    "responses",
    "headers",
    "bursts",
    "arrivals",
    "tickets",
    "frames",
    "records",
]
ADVERBS = ["quickly", "slowly", "rarely", "always", "twice", "eagerly", "lazily", "again"]
# Each type has its own flavour so a type-specific regex mostly matches one type.
TYPE_WORDS = {
    1: ["alpha", "amber", "apex"],
    2: ["beta", "blue", "bolt"],
    3: ["gamma", "green", "grid"],
    4: ["delta", "dusk", "drift"],
}


def sentence(rng: random.Random, kind: int) -> str:
    words = [
        rng.choice(SUBJECTS),
        rng.choice(VERBS),
        str(rng.randint(1, 9999)),
        rng.choice(OBJECTS),
        rng.choice(ADVERBS),
        "near",
        rng.choice(TYPE_WORDS[kind]),
    ]
    if rng.random() < 0.3:
        words += ["and", rng.choice(VERBS), rng.choice(OBJECTS)]
    return " ".join(words).capitalize() + "."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).with_name("sentences.tsv")))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="ascii") as f:
        for _ in range(args.sentences):
            kind = rng.randint(1, 4)
            f.write(f"{kind}\t{sentence(rng, kind)}\n")


if __name__ == "__main__":
    main()
