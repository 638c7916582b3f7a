"""Where a layer is in a model: ``N`` in a decoder-only or encoder-only model, and in an
encoder-decoder model (BART, Marian, Pegasus …) ``encoder.N``, ``decoder.N`` (the
decoder's causal self-attention) or ``decoder.N.cross`` (its cross-attention, whose keys
and values come from the encoder's output, ``x_kv``).

A checkpoint is an encoder-decoder one when its tensors hold numbered layers under both an
``encoder.`` and a ``decoder.`` module; its layer is then found among the tensors of that
part alone (``Part.names``), as a decoder-only model's is among all of them. HRM's two
stacks of layers, run in turn (``L_module`` and ``H_module``), are two parts the same
way: ``L_module.N`` and ``H_module.N``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import MhaError

ADDRESS = re.compile(r"(encoder|decoder|l_module|h_module)\.(\d{1,6})(\.cross)?")
_PART_LAYER = re.compile(r"(?:^|\.)(encoder|decoder|L_module|H_module)\.(?:layers|layer|block)"
                         r"\.\d+\.")
FORMS = "encoder.N, decoder.N or decoder.N.cross"
STACKS = "L_module.N or H_module.N"  # (HRM's)
PAIRS = ({"encoder", "decoder"}, {"L_module", "H_module"})  # the parts a model may have
_SPELLED = {"l_module": "L_module", "h_module": "H_module"}


def address(text: str) -> str | None:
    """``encoder.N``, ``decoder.N`` or ``decoder.N.cross`` as typed (its canonical
    spelling), else None; ``encoder.N.cross`` is an error (an encoder reads itself)."""
    m = ADDRESS.fullmatch(text.strip().lower())
    if m is None:
        return None
    if m[1] == "encoder" and m[3]:
        raise MhaError(f"--layer {text.strip()}: an encoder has no cross-attention; the "
                       f"layers of an encoder-decoder model are {FORMS}", key="layer")
    if m[1] in _SPELLED and m[3]:
        raise MhaError(f"--layer {text.strip()}: HRM's stacks have no cross-attention; its "
                       f"layers are {STACKS}", key="layer")
    return f"{_SPELLED.get(m[1], m[1])}.{int(m[2])}{m[3] or ''}"


@dataclass(frozen=True)
class Part:
    """One attention of an encoder-decoder model: its part, its layer number in that part,
    and whether it is the decoder's cross-attention."""

    part: str  # "encoder" or "decoder" (HRM's: "L_module" or "H_module")
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
    first = re.search(r"(?:^|\.)(encoder|decoder|L_module|H_module)\.", name)
    return first is not None and first[1] != part


def parts_of(names: tuple[str, ...]) -> set[str]:
    """The parts whose numbered layers the tensors hold: an encoder and a decoder, HRM's
    two stacks, or none (a model of one part)."""
    parts = {m[1] for n in names if (m := _PART_LAYER.search(n))}
    return parts if parts in PAIRS else set()


def is_encoder_decoder(names: tuple[str, ...]) -> bool:
    """Whether the tensors hold numbered layers of an encoder and of a decoder."""
    return parts_of(names) == {"encoder", "decoder"}


def part_of(layer: int | str, names: tuple[str, ...], source: str) -> Part | None:
    """The part a ``--layer`` names in this checkpoint (None: a model of one part, whose
    layers are numbered from 0); an address of the wrong kind for the model is an error
    that says which to give."""
    two = parts_of(names)
    stacks = two == PAIRS[1]
    if isinstance(layer, int) or str(layer).isdigit():
        if stacks:
            raise MhaError(f"--layer {layer}: this model's layers are in two stacks; give "
                           f"{STACKS} (e.g. L_module.{layer}, H_module.{layer})",
                           source=source, key="layer")
        if two:
            raise MhaError(f"--layer {layer}: this is an encoder-decoder model; give {FORMS} "
                           f"(e.g. encoder.{layer}, decoder.{layer}, decoder.{layer}.cross)",
                           source=source, key="layer")
        return None
    canonical = address(str(layer))
    if canonical is None:
        raise MhaError(f"--layer {layer}: expected a layer number from 0, or {FORMS} in an "
                       f"encoder-decoder model ({STACKS} in HRM's stacks)", source=source,
                       key="layer")
    m = ADDRESS.fullmatch(canonical.lower())
    assert m is not None  # (made by address)
    part = _SPELLED.get(m[1], m[1])
    if part not in two:
        raise MhaError(f"--layer {layer}: " + (
            f"this model's layers are in two stacks, {STACKS}" if stacks else
            f"this is an encoder-decoder model; give {FORMS}" if two else
            "this model is not an encoder-decoder one; its layers are numbered from 0"),
            source=source, key="layer")
    return Part(part, int(m[2]), bool(m[3]))
