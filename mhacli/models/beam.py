"""Beam: built like Llama (read by ``family.decoder``), written from transformers'
``modeling_beam.py``: q/k RMS norms over each head, a sigmoid gate of each head's output
from its own gate_proj with one bias per head (gate_bias), RoPE on the sliding layers;
its full-attention layers (rope_parameters null for their type) turn nothing and scale
each query at position p by (1 + (p + 1) / 2048)^0.1 (its compute_attention_scaling,
constants of the model's code): the setting ``temperature`` as a power law.
"""

from __future__ import annotations

from .family import Family, Layer, decoder
from .reading import Reader
from .rules import said

SIZE, POWER = 2048.0, 0.1  # compute_attention_scaling's constants


@said("causal; sliding windows by layer_types (all but every 6th layer and the last); "
      "RoPE on the sliding layers; the others none, each query × (1 + (p + 1) / 2048)^0.1; "
      "q/k RMS norms over each head; a sigmoid gate of each head's output (gate_proj, a "
      "bias per head gate_bias)")
def beam(f: Family, r: Reader, stem: str) -> Layer:
    """A Beam layer: the Llama line's reading, then the query scaling of a layer RoPE
    leaves unturned."""
    out = decoder(f, r, stem)
    if "rope" not in out:
        out["temperature"] = r.read("temperature", "rope_parameters",
                                    {"size": SIZE, "power": POWER})
        r.note("temperature", "Beam's layer without RoPE (rope_parameters null for its "
               "type): each query × (1 + (p + 1) / 2048)^0.1, the model's "
               "compute_attention_scaling")
    return out


def sixth_and_last(r: Reader, i: int) -> str:
    """Beam's default layer_types: every 6th layer (counting from 1) and the last attend
    fully, the others slide."""
    last = (r.count("num_hidden_layers") or 0) - 1
    return "full_attention" if (i + 1) % 6 == 0 or i == last else "sliding_attention"
