"""The JAX baseline of the benchmark harness computes what PyTorch does:
the jnp tiny Llama gives CPU PyTorch's logits, and its one-program training
step (clipping, AdamW, cosine schedule) gives the losses of the PyTorch
loop, on the PJRT plugin torch-pjrt uses and on jaxlib's CPU."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("jax")

from torch_pjrt.bench import jax_forms  # noqa: E402
from torch_pjrt.bench.workloads import _llama_train, _tiny_llama, _tokens, modes  # noqa: E402

MODES = ["jax_jit", "jax_jit_cpu"]


@pytest.mark.parametrize("mode", MODES)
def test_jax_llama_forward_matches_pytorch(mode):
    model = _tiny_llama().eval()
    (ids,) = _tokens(2, 16)()
    case = jax_forms.llama_fwd(modes()[mode], model, ids)
    got = torch.from_numpy(__import__("numpy").array(case.step()))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_jax_llama_training_step_matches_pytorch(mode):
    steps = 4
    cpu = _llama_train(modes()["cpu_eager"], 2, 16, lr=3e-3)
    expected = [float(cpu.step()) for _ in range(steps)]
    before = jax_forms.compilations()
    case = _llama_train(modes()[mode], 2, 16, lr=3e-3)
    got = [float(case.step())]
    after_first = jax_forms.compilations()
    got += [float(case.step()) for _ in range(steps - 1)]
    case.sync()
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-4, atol=1e-5)
    assert after_first > before  # the listener sees JAX compile
    assert jax_forms.compilations() == after_first  # one program, reused every step


@pytest.mark.parametrize("mode", MODES)
def test_jax_llama_greedy_decode_gives_generate_tokens(mode):
    model = _tiny_llama().eval()
    prompt = torch.tensor([list(b"The compiler ")], dtype=torch.long)
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=12, min_new_tokens=12, do_sample=False,
                                  cache_implementation="static", disable_compile=True)
    case = jax_forms.llama_decode(modes()[mode], model, prompt, 12)
    got = torch.from_numpy(__import__("numpy").array(case.step())).long()
    assert torch.equal(got, expected)
