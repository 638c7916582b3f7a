"""Where a layer is in a model: ``N`` in a decoder-only or encoder-only model, and in an
encoder-decoder model (BART, Marian, Pegasus …) ``encoder.N``, ``decoder.N`` (the
decoder's causal self-attention) or ``decoder.N.cross`` (its cross-attention, whose keys
and values come from the encoder's output, ``x_kv``).

A checkpoint is an encoder-decoder one when its tensors hold numbered layers under both an
``encoder.`` and a ``decoder.`` module; its layer is then found among the tensors of that
part alone (``Part.names``), as a decoder-only model's is among all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import MhaError

ADDRESS = re.compile(r"(encoder|decoder)\.(\d{1,6})(\.cross)?")
_PART_LAYER = re.compile(r"(?:^|\.)(encoder|decoder)\.(?:layers|layer|block)\.\d+\.")
FORMS = "encoder.N, decoder.N or decoder.N.cross"


def address(text: str) -> str | None:
    """``encoder.N``, ``decoder.N`` or ``decoder.N.cross`` as typed (its canonical
    spelling), else None; ``encoder.N.cross`` is an error (an encoder reads itself)."""
    m = ADDRESS.fullmatch(text.strip().lower())
    if m is None:
        return None
    if m[1] == "encoder" and m[3]:
        raise MhaError(f"--layer {text.strip()}: an encoder has no cross-attention; the "
                       f"layers of an encoder-decoder model are {FORMS}", key="layer")
    return f"{m[1]}.{int(m[2])}{m[3] or ''}"


@dataclass(frozen=True)
class Part:
    """One attention of an encoder-decoder model: its part, its layer number in that part,
    and whether it is the decoder's cross-attention."""

    part: str  # "encoder" or "decoder"
    number: int
    cross: bool = False

    @property
    def name(self) -> str:
        return f"{self.part}.{self.number}" + (".cross" if self.cross else "")

    def names(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The checkpoint's tensors of this part (its encoder's or its decoder's)."""
        inside = re.compile(rf"(?:^|\.){self.part}\.")
        return tuple(n for n in names if inside.search(n) and not _other(n, self.part))


def _other(name: str, part: str) -> bool:
    """A tensor of the other part whose name holds this part's word further in."""
    first = re.search(r"(?:^|\.)(encoder|decoder)\.", name)
    return first is not None and first[1] != part


def is_encoder_decoder(names: tuple[str, ...]) -> bool:
    """Whether the tensors hold numbered layers of an encoder and of a decoder."""
    parts = {m[1] for n in names if (m := _PART_LAYER.search(n))}
    return parts == {"encoder", "decoder"}


def part_of(layer: int | str, names: tuple[str, ...], source: str) -> Part | None:
    """The part a ``--layer`` names in this checkpoint (None: a model of one part, whose
    layers are numbered from 0); an address of the wrong kind for the model is an error
    that says which to give."""
    two = is_encoder_decoder(names)
    if isinstance(layer, int) or str(layer).isdigit():
        if two:
            raise MhaError(f"--layer {layer}: this is an encoder-decoder model; give {FORMS} "
                           f"(e.g. encoder.{layer}, decoder.{layer}, decoder.{layer}.cross)",
                           source=source, key="layer")
        return None
    canonical = address(str(layer))
    if canonical is None:
        raise MhaError(f"--layer {layer}: expected a layer number from 0, or {FORMS} in an "
                       "encoder-decoder model", source=source, key="layer")
    if not two:
        raise MhaError(f"--layer {layer}: this model is not an encoder-decoder one; its layers "
                       "are numbered from 0", source=source, key="layer")
    m = ADDRESS.fullmatch(canonical)
    assert m is not None  # (made by address)
    return Part(m[1], int(m[2]), bool(m[3]))
