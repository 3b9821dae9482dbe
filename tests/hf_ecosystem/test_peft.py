"""PEFT on the tpu device, unchanged: LoRA adapters on the tiny Llama's q
and v projections train for 20 AdamW steps with the CPU's losses; the
adapters saved from tpu reload (onto tpu and onto the CPU) with the same
outputs; merging them into the base weights on tpu gives the CPU's merged
weights and the unmerged model's outputs. No CPU fallback."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_pjrt

peft = pytest.importorskip("peft")

from tiny_models import llama  # noqa: E402

DEV = torch_pjrt.settings().device_name
STEPS = 20


def _lora_model():
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                             task_type="CAUSAL_LM")
    torch.manual_seed(1)  # the adapters' A matrices are drawn at random
    return peft.get_peft_model(llama(), config)


def _batches():
    g = torch.Generator().manual_seed(2)
    return [torch.randint(3, 1000, (4, 24), generator=g) for _ in range(STEPS)]


def _train(device: str):
    model = _lora_model().to(device).train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 5))
    losses = []
    for ids in _batches():
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
    return model, losses


@pytest.fixture(scope="module")
def trained():
    cpu_model, cpu_losses = _train("cpu")
    torch_pjrt.reset_metrics()
    model, losses = _train(DEV)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    return cpu_model, cpu_losses, model, losses


def test_lora_training_matches_cpu(trained):
    cpu_model, cpu_losses, model, losses = trained
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ("q_proj" in n or "v_proj" in n) for n in trainable)
    assert losses[-1] < losses[0]  # the adapters learn
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    cpu_params = dict(cpu_model.named_parameters())
    for name in trainable:
        torch.testing.assert_close(dict(model.named_parameters())[name].detach().cpu(),
                                   cpu_params[name].detach(), rtol=1e-3, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")


def test_adapters_save_and_reload(trained, tmp_path):
    _, _, model, _ = trained
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    ids = _batches()[0][:2]
    with torch.no_grad():
        expected = model.eval()(input_ids=ids.to(DEV)).logits.cpu()
    for device in (DEV, "cpu"):
        reloaded = peft.PeftModel.from_pretrained(llama(), tmp_path / "adapter").to(device).eval()
        with torch.no_grad():
            got = reloaded(input_ids=ids.to(device)).logits.cpu()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=lambda m: f"{device}: {m}")


def test_merged_weights_equal_cpu(trained):
    cpu_model, _, model, _ = trained
    ids = _batches()[1][:2]
    with torch.no_grad():
        unmerged = model.eval()(input_ids=ids.to(DEV)).logits.cpu()
    # The same adapters merged on the CPU, and the CPU-trained ones merged there.
    same_on_cpu = copy.deepcopy(model).to("cpu").merge_and_unload().state_dict()
    cpu_trained = cpu_model.merge_and_unload().state_dict()
    torch_pjrt.reset_metrics()
    merged = model.merge_and_unload()
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    for name, value in merged.state_dict().items():
        torch.testing.assert_close(value.cpu(), same_on_cpu[name], rtol=1e-5, atol=1e-7,
                                   msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(value.cpu(), cpu_trained[name], rtol=1e-3, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")
    with torch.no_grad():
        got = merged(input_ids=ids.to(DEV)).logits.cpu()
    torch.testing.assert_close(got, unmerged, rtol=1e-4, atol=1e-5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
