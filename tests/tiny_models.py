"""Tiny randomly initialised models saved as model directories, for tests of the code that
loads and runs real Hugging Face models (the embedded encoder's tokenizer, BERT weights small
enough to train on a CPU in seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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


@contextmanager
def deterministic_torch(seed: int) -> Iterator[None]:
    """Torch as a test that trains needs it: one thread (a reduction's order, hence its last
    bits, depends on the thread count, and a training that chooses an epoch by accuracy
    amplifies them), deterministic kernels, the global generator seeded; the process's
    settings come back afterwards, so the tests around it see what they saw before."""
    import torch

    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    state = torch.random.get_rng_state()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        torch.random.set_rng_state(state)


def seeded_weights(model: Any, *, seed: int, std: float) -> Any:
    """Overwrite the randomly initialised weights of `model` from a generator of its own:
    N(0, std) for every matrix and embedding (the padding row stays zero), the norms' ones and
    the zero biases as the library set them. The weights then depend on `seed` alone, not on
    the library's init code, its version, nor what the process drew from torch's generator
    before (the prompt-tuning toy task once learned on one machine and not on another)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    padding = {f"{name}.weight": module.padding_idx for name, module in model.named_modules()
               if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None}
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            if parameter.dim() < 2:
                continue
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
            if name in padding:
                parameter[padding[name]] = 0
    return model
