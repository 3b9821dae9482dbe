"""Tiny Hugging Face models built from configs, shared by the ecosystem
tests and benchmarks/hf_ecosystem.py. Nothing is fetched from a hub: weights
come from a seeded initialisation, tokenizers from vocabularies written
here."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def unet2d():
    """An unconditional UNet2DModel on 16x16 RGB images, with attention."""
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(32, 64), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D")).eval()


def unet2d_condition(cross_attention_dim: int = 32):
    """A text-conditioned UNet2DConditionModel on 8x8 latents of 4 channels."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64), norm_num_groups=8,
                                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                                cross_attention_dim=cross_attention_dim, attention_head_dim=8).eval()


def vae():
    """An AutoencoderKL from 16x16 RGB images to 8x8 latents of 4 channels."""
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                         down_block_types=("DownEncoderBlock2D",) * 2,
                         up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8,
                         sample_size=16).eval()


def dit():
    """A class-conditional DiTTransformer2DModel on 8x8 latents of 4 channels;
    1000 classes, as DiTPipeline takes class 1000 for the unconditional pass."""
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    return DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
                                 out_channels=8, num_layers=2, sample_size=8, patch_size=2,
                                 num_embeds_ada_norm=1000, norm_num_groups=8).eval()


def _byte_symbols() -> list[str]:
    """The 256 printable symbols byte-level BPE vocabularies use for bytes:
    printable Latin-1 bytes stand for themselves, the others for code points
    from 256 on."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def clip_tokenizer(directory: Path):
    """A CLIPTokenizer over a byte-level vocabulary (every byte, alone and
    word-final) with a few merges, written into `directory`."""
    from transformers import CLIPTokenizer

    chars = _byte_symbols()
    merges = ["a t", "t h", "th e</w>", "c a", "ca t</w>"]
    vocab = chars + [c + "</w>" for c in chars] + [m.replace(" ", "") for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return CLIPTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"), model_max_length=16)


def clip_text_encoder(vocab_size: int, hidden: int = 32):
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    return CLIPTextModel(CLIPTextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        max_position_embeddings=16, projection_dim=hidden)).eval()


def llama(vocab_size: int = 1000):
    """The tiny Llama of the Transformers tests (causal LM, 1000 tokens unless
    told otherwise)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg)
