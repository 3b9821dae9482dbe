"""A decode loop written by hand over one compiled step (forward over
transformers' StaticCache, then argmax), as a JAX user writes it with
jax.jit: in strict mode each call's graph joins the device's pending graph,
the next token's `token[:, None]` view is cut inside that graph instead of
running it, so each token is one program and the host never waits inside
the loop. Tokens match the same loop on the CPU."""

from __future__ import annotations

import pytest
import torch
import transformers

import torch_pjrt
from torch_pjrt.demo import tiny_llama

NAME = torch_pjrt.settings().device_name
NEW_TOKENS = 8


def decode_loop(device: str, compiled: bool):
    model = tiny_llama().eval().to(device)
    prompt = torch.tensor([list(b"The compiler ")], dtype=torch.long, device=device)
    length = prompt.shape[1]
    cache = transformers.StaticCache(config=model.config, max_cache_len=length + NEW_TOKENS)
    config = model.config
    cache.early_initialization(batch_size=1, num_heads=config.num_key_value_heads,
                               head_dim=config.hidden_size // config.num_attention_heads,
                               dtype=torch.float32, device=torch.device(device))
    prefill = torch.arange(length, device=device)
    positions = [torch.tensor([length + i], device=device) for i in range(NEW_TOKENS - 1)]

    def decode_step(ids, pos):
        logits = model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True).logits
        return logits[:, -1].argmax(-1)

    step = torch.compile(decode_step, backend="tpu") if compiled else decode_step

    def run(on_token=lambda i: None):
        with torch.no_grad():
            cache.reset()
            tokens = [step(prompt, prefill)]
            for i, pos in enumerate(positions):
                on_token(i)
                tokens.append(step(tokens[-1][:, None], pos))
            return torch.cat([prompt, torch.stack(tokens, dim=1)], dim=1)

    return run


@pytest.mark.strict_only
def test_compiled_decode_loop_runs_one_program_per_token():
    expected = decode_loop("cpu", compiled=False)()
    torch._dynamo.reset()
    run = decode_loop(NAME, compiled=True)
    for _ in range(2):  # the prefill and the one-token graph compile here
        first = run().cpu()
    assert torch.equal(first, expected), (first, expected)

    seen: dict[int, dict] = {}

    def on_token(i):
        if i in (2, 6):
            seen[i] = torch_pjrt.metrics()

    torch_pjrt.reset_metrics()
    out = run(on_token)
    m = torch_pjrt.metrics()
    # From token 3 to token 7: four tokens, four programs, nothing waited
    # for and nothing compiled; each graph ran when the next was recorded.
    between = {k: seen[6][k] - seen[2][k] for k in ("executions", "host_syncs", "compilations")}
    assert between == {"executions": 4, "host_syncs": 0, "compilations": 0}, between
    # The prefill graph and the first one-token graph share a pending graph;
    # every later token's graph runs the one before it; the final stack of
    # tokens reads the last.
    assert m["fused_flushes"] == {"compiled graph repeated": NEW_TOKENS - 2, "value read": 1}, \
        m["fused_flushes"]
    assert m["compilations"] == 0, m["recompile_reasons"]
    assert torch.equal(out.cpu(), expected), (out, expected)


def test_views_of_pending_results_are_read_and_written_inside_the_pending_graph():
    """Strict mode: slicing a compiled graph's result that has not run yet,
    or copying into a view of it, records the copy into the pending graph
    (nothing runs); values match the CPU when one is read."""
    def f(x):
        return torch.sin(x) * 2 + 1

    def h(x):
        return torch.cos(x) - 1

    torch._dynamo.reset()
    g, k = torch.compile(f, backend="tpu"), torch.compile(h, backend="tpu")
    x_cpu = torch.randn(6, 5)
    x = x_cpu.to(NAME)
    k(g(x)[1:4, ::2]).cpu()  # compiles both
    with torch_pjrt.eager_mode("strict"):
        torch_pjrt.reset_metrics()
        y = g(x)
        z = k(y[1:4, ::2])           # a strided view of a pending value, read by the next graph
        y[2:4, 1:3] = z[0:2, 0:2]    # a pending value copied into a view of another
        m = torch_pjrt.metrics()
        y[0] = 7.0                   # a fill written into a row of a pending value
        got_y, got_z = y.cpu(), z.cpu()
    assert m["executions"] == 0 and m["fused_flushes"] == {}, (m["executions"], m["fused_flushes"])
    want_y = f(x_cpu)
    want_z = h(want_y[1:4, ::2])
    want_y[2:4, 1:3] = want_z[0:2, 0:2]
    want_y[0] = 7.0
    torch.testing.assert_close(got_y, want_y, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_z, want_z, rtol=1e-6, atol=1e-6)


def test_a_failed_check_survives_thousands_of_later_ones():
    """Index checks are read at the next host wait; a loop that never waits
    keeps only the checks it has not yet seen pass (they are swept past a
    bound), so a failure early in a long loop still raises at the wait."""
    x = torch.arange(5.0, device=NAME)
    good, bad = torch.tensor([1], device=NAME), torch.tensor([9], device=NAME)
    x.index_select(0, bad)
    for _ in range(4200):
        x.index_select(0, good)
    with pytest.raises(IndexError, match="reported when the host next waited"):
        x.sum().item()
    assert x.index_select(0, good).item() == 1.0
