"""Tokenizers for the tiny models, built here rather than fetched from a hub.

`chat_tokenizer` (also reached as `byte_tokenizer`, the name the TRL tests
import) is a byte-level BPE tokenizer whose vocabulary fills the
tiny Llama's 1000 ids exactly (so every token the model can emit decodes to
text), with a chat template, as `transformers serve` needs: the server turns
each request's messages into ids with the template and decodes the reply
with the tokenizer.
"""

from __future__ import annotations

import itertools
import string

# The tiny Llama's special ids (tiny_models.llama): pad 0, bos 1, eos 2.
SPECIALS = ["<pad>", "<s>", "</s>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _byte_symbols() -> list[str]:
    """The 256 symbols byte-level BPE uses for bytes (GPT-2's mapping):
    printable Latin-1 bytes stand for themselves, the others for code points
    from 256 on."""
    printable = (set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD))
                 | set(range(0xAE, 0x100)))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def chat_tokenizer(vocab_size: int = 1000):
    """A PreTrainedTokenizerFast with `vocab_size` tokens: the specials, the
    256 bytes, and merges of two lowercase letters or digits (in a fixed
    order) for the rest; bos/eos/pad set and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = SPECIALS + _byte_symbols()
    alphabet = string.ascii_lowercase + string.digits
    pairs = itertools.product(alphabet, repeat=2)
    merges = [next(pairs) for _ in range(vocab_size - len(vocab))]
    vocab += [a + b for a, b in merges]
    assert len(vocab) == vocab_size and len(set(vocab)) == vocab_size
    model = models.BPE(vocab={token: i for i, token in enumerate(vocab)}, merges=merges)
    backend = Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def byte_tokenizer():
    """The byte-level chat tokenizer of the tiny Llama (see chat_tokenizer)."""
    return chat_tokenizer()
