"""Serving on the tpu device: Transformers' continuous batching and its
OpenAI-compatible server, `transformers serve`, with the tiny Llama.

Continuous batching (`generate_batch`, paged KV cache, greedy) answers 32
prompts of lengths 3 to 39 with the CPU's tokens, without falling back to
the CPU, and once a first call has run, a second call with new prompts
compiles nothing of a new shape: torch_pjrt._serving prepares each batch on
the host and pads it, so the forward pass only ever sees 2 shapes (64 and
128 query tokens), and it extends transformers' warm-up (run by
`generate_batch`) to each of them. What may still compile is a cache write
without buffer donation, at most once per write and size (8); measured: 0
here, 0 or 1 in benchmarks/hf_serving.py. Without _serving, a second call
of this kind compiled about 400 new programs.

The server is the real CLI from the environment (`transformers serve
<model dir> --device tpu`), started as a subprocess on a free localhost port
and killed at the end of the test. It finds the device through torch's
backend autoload: torch calls each `torch.backends` entry point when it is
imported, and torch-pjrt's (torch_pjrt_autoload) imports torch_pjrt when
TORCH_PJRT_AUTOLOAD=1, the one setting a user adds to the command line. The server runs with
TORCH_PJRT_FALLBACK=error (a CPU fallback would fail the request) and
writes every program it builds into a dump directory, which shows that it
computed on the device and lets the test count programs. 32 concurrent
chat/completions requests (temperature 0, 8 new tokens) must all be answered
with the text the CPU model generates for the same messages, both in the
default mode (one `generate` at a time, messages of one token length: each
new length is new programs there) and with `--continuous-batching`, where
the batch manager warms up both padded batch sizes before its first batch
(torch_pjrt._serving does that on this device; the server asks for no
warm-up), so that after a first round of 32 messages of varied lengths, a
second round of 32 new ones builds no program of a new shape (measured:
none at all).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
import torch

import torch_pjrt

transformers = pytest.importorskip("transformers")

from tiny_models import llama  # noqa: E402
from tiny_tokenizers import chat_tokenizer  # noqa: E402

DEV = torch_pjrt.settings().device_name
REQUESTS = 32
NEW_TOKENS = 8
# A small paged cache: 16 blocks of 32 tokens, batches of up to 128 tokens.
CB = dict(page_size=32, num_blocks=16, max_batch_tokens=128)
CB_FLAGS = ["--continuous-batching", "--cb-block-size", "32", "--cb-num-blocks", "16",
            "--cb-max-batch-tokens", "128"]
Q_SIZES = (64, 128)  # the padded batch sizes: powers of two from 64 to max_batch_tokens
CACHE_WRITES_PER_STEP = 2 * 2  # keys and values of 2 layers
SERVER_START_S = 90
REQUEST_S = 120


def _prompts(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 40, (REQUESTS,), generator=g).tolist()
    return [torch.randint(3, 1000, (n,), generator=g).tolist() for n in lengths]


def _generate_batch(model, prompts: list[list[int]]) -> list[list[int]]:
    config = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False,
                                           eos_token_id=2, pad_token_id=0)
    cb_config = transformers.ContinuousBatchingConfig(**CB)
    results = model.generate_batch(prompts, generation_config=config,
                                   continuous_batching_config=cb_config)
    assert len(results) == len(prompts)
    assert all(r.error is None for r in results.values())
    return [list(r.generated_tokens) for r in results.values()]  # in the order of the prompts


def test_generate_batch_matches_cpu_and_stops_compiling():
    cpu_model = llama().eval()
    model = llama().eval().to(DEV)
    first, second = _prompts(0), _prompts(1)
    assert len({len(p) for p in first}) > 10  # prompts of many lengths

    torch_pjrt.reset_metrics()
    warm = _generate_batch(model, first)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    assert warm == _generate_batch(cpu_model, first)
    assert all(len(t) == NEW_TOKENS or t[-1] == 2 for t in warm)

    torch_pjrt.reset_metrics()
    got = _generate_batch(model, second)
    m = torch_pjrt.metrics()
    print(f"second batch: {m['compilations']} compilations, {m['executions']} executions")
    assert m["fallback_ops"] == {}
    # Nothing of a new shape: at most a cache write compiled again without
    # buffer donation (see torch_pjrt/_serving.py), one per write and size.
    assert set(m["recompile_reasons"]) <= {"new combination: aten::index_copy"}, m
    assert m["compilations"] <= CACHE_WRITES_PER_STEP * len(Q_SIZES)
    assert got == _generate_batch(cpu_model, second)


# --- the server ----------------------------------------------------------------------------


WORDS = "tell me about the tiny device that serves tokens in batches quickly please".split()


def _messages(seed: int, same_length: bool) -> list[str]:
    """REQUESTS user messages; `same_length`: all of one token length (the
    default mode runs `generate` with a dynamic cache, where every new
    length is a new set of programs)."""
    g = torch.Generator().manual_seed(seed)
    if same_length:
        return [f"question {seed}{i:02d}" for i in range(REQUESTS)]
    counts = torch.randint(1, 12, (REQUESTS,), generator=g).tolist()
    return [" ".join(WORDS[j] for j in torch.randint(0, len(WORDS), (n,), generator=g).tolist())
            for n in counts]


@pytest.fixture(scope="module")
def served_model(tmp_path_factory) -> Path:
    """The tiny Llama and its chat tokenizer, saved as a server loads them."""
    path = tmp_path_factory.mktemp("tiny-llama-chat")
    llama().save_pretrained(path)
    chat_tokenizer().save_pretrained(path)
    return path


def _cpu_answers(model_dir: Path, messages: list[str]) -> list[str]:
    """What the CPU model answers: the server's template, greedy decoding."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    answers = []
    for text in messages:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        answers.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    return answers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]



@contextlib.contextmanager
def _server(model_dir: Path, work: Path, flags: list[str]) -> Iterator[tuple[str, Path]]:
    """Runs `transformers serve` until the block ends; yields its URL and its
    program dump directory. Fails (never hangs) if it is not up in time."""
    cli = shutil.which("transformers", path=str(Path(sys.executable).parent))
    if cli is None:
        pytest.skip("the transformers CLI is not installed next to this Python")
    port, dump, log = _free_port(), work / "programs", work / "server.log"
    dump.mkdir(parents=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCH_PJRT_FALLBACK="error",
               TORCH_PJRT_DUMP_DIR=str(dump), TORCH_PJRT_AUTOLOAD="1")
    url = f"http://localhost:{port}"
    with open(log, "wb") as out:
        command = [cli, "serve", str(model_dir), "--device", DEV, "--host", "localhost",
                   "--port", str(port), *flags]
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready in {SERVER_START_S} s:\n{log.read_text()[-4000:]}")
            time.sleep(0.25)
        yield url, dump
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _ask_all(url: str, model_dir: Path, messages: list[str]) -> list[str]:
    def ask(text: str) -> str:
        body = {"model": str(model_dir), "messages": [{"role": "user", "content": text}],
                "max_tokens": NEW_TOKENS, "temperature": 0}
        request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=REQUEST_S) as r:
            reply = json.load(r)
        return reply["choices"][0]["message"]["content"]

    with ThreadPoolExecutor(len(messages)) as pool:
        return list(pool.map(ask, messages))


@pytest.mark.parametrize("mode", ["generate", "continuous-batching"])
def test_transformers_serve_answers_like_cpu(served_model, tmp_path, mode):
    cb = mode == "continuous-batching"
    rounds = [_messages(seed, same_length=not cb) for seed in (1, 2)]
    expected = [_cpu_answers(served_model, r) for r in rounds]
    assert len(set(expected[0])) > 1  # the answers depend on the message
    with _server(served_model, tmp_path, CB_FLAGS if cb else []) as (url, dump):
        start = time.perf_counter()
        first = _ask_all(url, served_model, rounds[0])
        warm_s, warm = time.perf_counter() - start, {p.name for p in dump.iterdir()}
        start = time.perf_counter()
        second = _ask_all(url, served_model, rounds[1])
        new = {p.name for p in dump.iterdir()} - warm
        print(f"{mode}: round 1 {warm_s:.2f} s ({len(warm)} programs), round 2 "
              f"{time.perf_counter() - start:.2f} s ({len(new)} new programs)")
    assert warm  # it computed on the device
    assert first == expected[0]
    assert second == expected[1]
    if cb:  # as in the test above: at most cache writes without donation
        assert all(name.startswith("aten__index_copy-") for name in new), new
        assert len(new) <= CACHE_WRITES_PER_STEP * len(Q_SIZES)
