"""torch.Event and non-blocking downloads on tpu, and what they enable:
generate() deciding to stop one step late (Transformers' DeferredStopCheck),
with the same tokens as the CPU's."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

transformers = pytest.importorskip("transformers")

NAME = torch_pjrt.settings().device_name


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    with torch_pjrt.eager_mode(request.param):
        yield request.param


def _work(n: int = 3) -> torch.Tensor:
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)).to(NAME)
    for _ in range(n):
        x = torch.tanh(x @ x / 256)
    return x


def test_non_blocking_download_into_pinned_memory_waits_for_an_event(mode):
    x = _work()
    expected = x.cpu()
    syncs = torch_pjrt.metrics()["host_syncs"]
    dst = torch.empty(256, 256).pin_memory()
    dst.copy_(x, non_blocking=True)
    event = torch.Event(device=NAME, blocking=True)
    event.record()
    assert torch_pjrt.metrics()["host_syncs"] == syncs  # neither waited for the device
    event.synchronize()
    assert event.query()
    assert torch.equal(dst, expected)


@pytest.mark.parametrize("view", ["transpose", "strided_slice", "select", "expanded"])
def test_non_blocking_download_of_a_view(mode, view):
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    take = {"transpose": lambda t: t.t(), "strided_slice": lambda t: t[::2, 1:],
            "select": lambda t: t[3], "expanded": lambda t: t.expand(2, 64, 32)[1]}[view]
    source = take(x.to(NAME) * 1)
    dst = torch.empty(source.shape).pin_memory()
    dst.copy_(source, non_blocking=True)
    event = torch.Event(device=NAME)
    event.record()
    event.synchronize()
    assert torch.equal(dst, take(x))


def test_a_recorded_event_launches_pending_fused_ops():
    with torch_pjrt.eager_mode("fused"):
        before = torch_pjrt.metrics()["fused_flushes"].get("event record", 0)
        x = _work(1) * 2
        event = torch.Event(device=NAME)
        event.record()
        event.synchronize()
        assert torch_pjrt.metrics()["fused_flushes"].get("event record", 0) == before + 1
        torch.testing.assert_close(x.cpu(), _work(1).cpu() * 2)


def test_pageable_and_converting_downloads_stay_synchronous(mode):
    x = _work()
    expected = x.cpu()
    pageable = torch.empty(256, 256)
    pageable.copy_(x, non_blocking=True)
    assert torch.equal(pageable, expected)  # readable at once, as on CUDA
    converted = torch.empty(256, 256, dtype=torch.float64).pin_memory()
    converted.copy_(x, non_blocking=True)
    assert torch.equal(converted, expected.double())


def test_dropping_the_destination_before_the_copy_ends_is_safe(mode):
    x = _work(6)
    dst = torch.empty(256, 256).pin_memory()
    dst.copy_(x, non_blocking=True)
    del dst  # its memory is held until the copy is done
    event = torch.Event(device=NAME)
    event.record()
    event.synchronize()
    torch.tpu.synchronize()


def test_an_event_never_recorded_is_complete():
    event = torch.Event(device=NAME)
    assert event.query()
    event.synchronize()


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


class _Collect(transformers.generation.streamers.BaseStreamer):
    def __init__(self):
        self.tokens = []

    def put(self, value):
        self.tokens.append(value.tolist())

    def end(self):
        pass


def test_generate_on_tpu_uses_the_deferred_check():
    from transformers.generation.utils import DeferredStopCheck
    assert DeferredStopCheck.is_supported(torch.device(NAME), None, False, False)
    assert not DeferredStopCheck.is_supported(torch.device(NAME), None, False, True)
    assert not DeferredStopCheck.is_supported(torch.device("cpu"), None, False, False)


@pytest.mark.parametrize("cache", ["static", "dynamic_returned"])
def test_generate_stops_late_with_the_cpu_tokens(mode, cache):
    cpu = _llama()
    dev = _llama().to(NAME)
    ids = torch.randint(3, 500, (2, 6), generator=torch.Generator().manual_seed(1))
    kwargs = dict(do_sample=False, max_new_tokens=12)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    else:
        kwargs.update(return_dict_in_generate=True)
    with torch.no_grad():
        free = cpu.generate(ids, **kwargs)
    free_ids = free if cache == "static" else free.sequences
    # An end-of-sequence token the first row emits at its 4th new token: it
    # stops there and waits (padded) for the other row.
    eos = int(free_ids[0, 6 + 3])
    kwargs.update(eos_token_id=eos)
    streamed = {}
    outputs = {}
    for where, model in (("cpu", cpu), ("tpu", dev)):
        streamer = _Collect()
        syncs = torch_pjrt.metrics()["host_syncs"]
        with torch.no_grad():
            out = model.generate(ids.to(next(model.parameters()).device), streamer=streamer,
                                 **kwargs)
        outputs[where] = out
        streamed[where] = streamer.tokens
        if where == "tpu":
            syncs = torch_pjrt.metrics()["host_syncs"] - syncs
    seq = {k: (v if cache == "static" else v.sequences) for k, v in outputs.items()}
    assert torch.equal(seq["tpu"].cpu(), seq["cpu"])
    assert streamed["tpu"] == streamed["cpu"]
    assert seq["cpu"].shape[1] < 6 + 12 or (seq["cpu"][1] == eos).any()
    if cache == "dynamic_returned":
        # The extra step's cache entries are rolled back.
        assert (outputs["tpu"].past_key_values.get_seq_length()
                == outputs["cpu"].past_key_values.get_seq_length())
    # The streamer reads each token on the host (a sync per token); without
    # one the loop never waits: see the next test.
    assert syncs <= 2 * len(streamed["tpu"]) + 4


def test_generate_without_a_streamer_does_not_wait_per_token(mode):
    cpu = _llama()
    dev = _llama().to(NAME)
    ids = torch.randint(3, 500, (1, 6), generator=torch.Generator().manual_seed(2))
    kwargs = dict(do_sample=False, max_new_tokens=16, min_new_tokens=16,
                  cache_implementation="static")
    with torch.no_grad():
        expected = cpu.generate(ids, **kwargs)
        dev.generate(ids.to(NAME), **kwargs)  # warm-up: programs compiled
        syncs = torch_pjrt.metrics()["host_syncs"]
        got = dev.generate(ids.to(NAME), **kwargs)
        syncs = torch_pjrt.metrics()["host_syncs"] - syncs
    assert torch.equal(got.cpu(), expected)
    assert syncs <= 4, syncs  # was one per token (16) before the deferred check
