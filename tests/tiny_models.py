"""Tiny randomly initialised models saved as model directories, for tests of the code that
loads and runs real Hugging Face models (the embedded encoder's tokenizer, BERT weights small
enough to train on a CPU in seconds)."""

from __future__ import annotations

from pathlib import Path


def save_tiny_bert(path: Path, *, layers: int = 3) -> str:
    """A BERT of `layers` layers (hidden size 32) with the embedded encoder's tokenizer, saved
    to `path`; seeded, so every call writes the same weights."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from metrics.scorers.encoder import embedded_encoder

    tokenizer = AutoTokenizer.from_pretrained(embedded_encoder())
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
