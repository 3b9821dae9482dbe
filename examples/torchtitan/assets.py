"""Writes what torchtitan's Llama debug config reads from disk, built here
because this project fetches nothing from a model hub: a small English-like
corpus (`c4_test/data.json`, one {"text": ...} per line, the layout of
torchtitan's "c4_test" dataset) and a byte-level BPE tokenizer trained on it
(`tokenizer/tokenizer.json` + `tokenizer_config.json`, under the debug
model's 2048-entry vocabulary).

    python examples/torchtitan/assets.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"

# Word classes for sentences with some structure, so the loss has something
# to learn beyond unigram frequencies.
SUBJECTS = "the cat|a dog|my friend|the old man|our teacher|the river|a small bird|the city|his sister|the farmer".split("|")
VERBS = "sees|finds|likes|carries|follows|paints|builds|remembers|crosses|watches".split("|")
OBJECTS = "the bridge|a red apple|the long road|an open door|the morning light|a wooden boat|the garden|a quiet song|the north wind|an old map".split("|")
TAILS = "before dawn|after the rain|in the valley|near the sea|every day|with care|without a word|at night|once again|by the fire".split("|")


def sentence(rng: random.Random) -> str:
    words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
    if rng.random() < 0.7:
        words.append(rng.choice(TAILS))
    return " ".join(words).capitalize() + "."


def write_corpus(path: Path, documents: int = 2000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = [" ".join(sentence(rng) for _ in range(rng.randint(8, 24))) for _ in range(documents)]
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "data.json", "w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return texts


def write_tokenizer(path: Path, texts: list[str], vocab_size: int = 1024) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
              "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/torchtitan")
    texts = write_corpus(out / "c4_test")
    write_tokenizer(out / "tokenizer", texts)
    print(f"torchtitan assets in {out}")


if __name__ == "__main__":
    main()
