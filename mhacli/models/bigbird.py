"""BigBird's block-sparse attention as its model computes it in eval mode, and the layers
of BigBird and BigBird-Pegasus, written from transformers' ``modeling_big_bird.py`` and
``modeling_bigbird_pegasus.py``.

The tokens are cut into blocks of block_size (the input padded to a whole number of them,
the padding keys blocked). The first and last blocks of queries see every key; block 1
sees blocks 0, 1, 2 and the last; the block before the last sees blocks 0 and the last
three; every other block i sees blocks i − 1, i, i + 1, block 0 and the last block. Each
of those rows also reads num_random_blocks "random" blocks, which in eval mode are all
block 0 (the model draws them only while training): block 0's keys are then in its
softmax 1 + num_random_blocks times, the same as a bias of log(1 + num_random_blocks) on
them. The mask and that bias are rules of the number of tokens; at or below (5 + 2 ·
num_random_blocks) · block_size tokens the model attends fully instead, as here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer
from .layouts import bert
from .reading import Reader, heads_of, linear
from .rules import said
from .seq2seq import bart


@dataclass(frozen=True)
class BlockSparse:
    """BigBird's blocks in eval mode: the mask and the bias of n tokens."""

    block: int
    random: int

    def full(self, n: int) -> bool:
        """Whether the model attends fully at n tokens (too few for its blocks)."""
        return n <= (5 + 2 * self.random) * self.block

    def _blocks(self, n: int) -> tuple[np.ndarray, np.ndarray, int]:
        rows = np.arange(n)[:, None] // self.block  # (n, 1): each query's block
        return rows, np.arange(n)[None, :] // self.block, -(-n // self.block)

    def mask(self, n: int, m: int) -> np.ndarray | None:
        """True where query i reads key j (None: every key)."""
        if self.full(n):
            return None
        q, k, count = self._blocks(n)
        last = count - 1
        middle = (q >= 1) & (q <= last - 1)
        near = np.where(q == 1, k <= 2, np.where(q == last - 1, k >= last - 2,
                                                 np.abs(k - q) <= 1))
        return np.where(middle, near | (k == 0) | (k == last), True)

    def __call__(self, n: int, m: int) -> np.ndarray | None:
        """The bias n × n: log(1 + random) on block 0's keys for the rows that read the
        random blocks (None: no bias)."""
        if self.full(n) or not self.random:
            return None
        q, k, count = self._blocks(n)
        middle = (q >= 1) & (q <= count - 2)
        return np.where(middle & (k == 0), math.log(1 + self.random), 0.0)


def _block_sparse(r: Reader, out: dict[str, Any]) -> None:
    """The layer's attention_type: full, or the blocks (``BlockSparse``) as rules."""
    kind = r.get("attention_type")
    block, random = r.count("block_size"), r.get("num_random_blocks")
    if kind == "original_full":
        return
    if kind != "block_sparse":
        raise r.error("attention_type", f"{shown(kind)}: expected original_full or "
                      "block_sparse")
    if block is None or isinstance(random, bool) or not isinstance(random, int) or random < 0:
        raise r.error("num_random_blocks" if block else "block_size", f"{shown(random)}: "
                      "block-sparse attention needs block_size and num_random_blocks")
    if out.get("mask") == "causal":
        raise r.error("attention_type", "'block_sparse' in a decoder: its blocks see both "
                      "ways, and the model's own decoding switches to original_full; mha "
                      "does not follow a causal model with block-sparse attention")
    rule = BlockSparse(block, random)
    out["position_mask"], out["position_bias"] = rule.mask, rule
    r.note("mask", f"config attention_type block_sparse (blocks of block_size {block}: "
           "the first and last see every key, the others their neighbours and the first "
           f"and last blocks; full at {(5 + 2 * random) * block} tokens or fewer)")
    r.note("bias", f"config num_random_blocks {random}: in eval mode every random block is "
           f"block 0, so its keys count {1 + random} times: log({1 + random}) added to them")


@said("query, key, value and output.dense; no mask (original_full), or block-sparse "
      "attention as a mask of blocks and the bias of its random blocks (eval mode: block 0)")
def big_bird(f: Family, r: Reader, stem: str) -> Layer:
    """BigBird: BERT's attention, over all tokens (original_full) or its blocks."""
    r.get("use_bias"), r.get("rescale_embeddings")
    out = bert(f, r, stem)
    _block_sparse(r, out)
    return out


@said("encoder: BigBird's attention (full or block-sparse, as a mask and a bias); decoder: "
      "causal, and its cross-attention over the encoder's output (x_kv)")
def bigbird_pegasus(f: Family, r: Reader, stem: str) -> Layer:
    """BigBird-Pegasus: its encoder's layers BigBird's (``self_attn.self.query`` …, its
    ``output``), its decoder's BART's."""
    r.get("use_bias")  # (the biases are the tensors the layer holds)
    if not r.has(f"{stem}self.query.weight"):
        r.get("attention_type"), r.get("block_size"), r.get("num_random_blocks")
        return bart(f, r, stem)
    r.get("decoder_attention_heads")
    heads, _, _ = heads_of(r, "encoder_attention_heads", None, r.count("d_model"))
    out: dict[str, Any] = {"heads": heads}
    for ours, theirs in (("q", "self.query"), ("k", "self.key"), ("v", "self.value")):
        linear(r, stem, theirs, out, ours)
    linear(r, stem, "output", out, "o")
    _block_sparse(r, out)
    return out
