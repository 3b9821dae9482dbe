"""A model split across the devices of one process at load:
from_pretrained(..., device_map=...) with an explicit map, and with "auto"
(with and without per-device budgets), generates the same tokens as one
device. accelerate must see the tpu devices (torch_pjrt._accelerate)."""

from __future__ import annotations

import json
import os

from conftest import run_python

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed")


def test_device_map_splits_layers_and_generates_like_one_device(tmp_path):
    code = f"""
        import gc, json, sys, torch, torch_pjrt, transformers
        sys.path.insert(0, {HERE!r})
        import workload
        path = {str(tmp_path)!r}
        workload.tiny_llama().save_pretrained(path)
        ids = torch.randint(0, workload.VOCAB, (2, 8), generator=torch.Generator().manual_seed(5))
        mask = torch.ones_like(ids)
        def generate(model):
            return model.generate(input_ids=ids.to("tpu:0"), attention_mask=mask.to("tpu:0"),
                                  max_new_tokens=12, do_sample=False, pad_token_id=0).cpu()
        reference = generate(transformers.LlamaForCausalLM.from_pretrained(path, device_map="tpu:0"))
        from accelerate.utils import get_max_memory
        seen = sorted(str(k) for k in get_max_memory())
        explicit = {{"model.embed_tokens": "tpu:0", "model.layers.0": "tpu:0", "model.layers.1": "tpu:1",
                    "model.norm": "tpu:1", "model.rotary_emb": "tpu:1", "lm_head": "tpu:1"}}
        budgets = get_max_memory({{1: "1GB", "cpu": "2GB", 0: "300KB"}})
        results = {{"accelerate_sees": seen, "budgets": [[str(k), v] for k, v in budgets.items()]}}
        for name, kw in [("explicit", dict(device_map=explicit)),
                         ("auto_budget", dict(device_map="auto", max_memory={{0: "300KB", 1: "1GB"}})),
                         ("auto", dict(device_map="auto"))]:
            for i in range(2):
                torch.tpu.reset_peak_memory_stats(i)
            model = transformers.LlamaForCausalLM.from_pretrained(path, **kw)
            tokens = generate(model)
            results[name] = {{
                "same_tokens": torch.equal(tokens, reference),
                "devices": sorted({{str(p.device) for p in model.parameters()}}),
                "weights_per_device": [sum(p.nbytes for p in model.parameters() if p.device.index == i) for i in range(2)],
                "peak_per_device": [torch.tpu.max_memory_allocated(i) for i in range(2)],
            }}
            del model
            gc.collect()
        print("RESULTS", json.dumps(results))
    """
    proc = run_python(code, env={"TORCH_PJRT_CPU_DEVICES": "2"}, timeout=300)
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULTS ")]
    assert line, proc.stderr[-3000:]
    results = json.loads(line[0][len("RESULTS "):])
    # accelerate asked for budgets sees both devices and the CPU.
    assert results["accelerate_sees"] == ["0", "1", "cpu"]
    for name in ("explicit", "auto_budget"):
        r = results[name]
        assert r["same_tokens"], name
        assert r["devices"] == ["tpu:0", "tpu:1"], (name, r)
        assert all(w > 0 for w in r["weights_per_device"]), (name, r)
        assert all(p >= w for p, w in zip(r["peak_per_device"], r["weights_per_device"])), (name, r)
    # Budgets by index are converted, ordered devices first, and checked
    # against the tpu devices: accelerate alone warns "Device 0 is not
    # available" (it counts CUDA devices).
    assert results["budgets"] == [["0", 300_000], ["1", 1_000_000_000], ["cpu", 2_000_000_000]]
    assert "is not available" not in proc.stderr, proc.stderr[-2000:]
    # Without budgets the whole (tiny) model fits on the first device.
    assert results["auto"]["same_tokens"] and results["auto"]["devices"] == ["tpu:0"]
    print(json.dumps(results, indent=1))
