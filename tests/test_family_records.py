"""A family is a record: a model built like Llama is read from its record alone, and a
model type no record names is refused by name. Runs on the committed fixtures (no torch)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mhacli.errors import MhaError
from mhacli.models import families
from mhacli.models.family import Family, decoder, every_layer, features
from mhacli.models.drafter import drafter
from mhacli.models.layer import read_layer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"


def _renamed(tmp_path: Path, source: str, model_type: str, **config: object) -> Path:
    """A copy of a fixture model whose config names another model type (and keys)."""
    folder = tmp_path / model_type
    shutil.copytree(FIXTURES / source, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type=model_type, **config)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_a_family_built_like_llama_is_one_record(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _renamed(tmp_path, "llama3", "llamalike")
    with pytest.raises(MhaError, match="model_type is 'llamalike': a model whose attention mha does not know"):
        read_layer(folder, 1)
    monkeypatch.setitem(families.FAMILIES, "llamalike",
                        replace(families.LLAMA, model_type="llamalike"))
    theirs, ours = read_layer(FIXTURES / "llama3", 1), read_layer(folder, 1)
    assert ours.family == "llamalike" and set(ours.weights) == set(theirs.weights)
    for key, w in theirs.weights.items():
        assert np.array_equal(w, ours.weights[key]), key
    assert dict(ours.settings) == dict(theirs.settings)


def test_a_record_changes_what_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tensors under a record that slides every layer (Mistral's rule) read the
    config's sliding_window as this layer's window, and under Llama's it is read off."""
    folder = _renamed(tmp_path, "llama3", "slider", sliding_window=3)
    monkeypatch.setitem(families.FAMILIES, "slider", Family("slider", window=every_layer))
    assert read_layer(folder, 0).settings["window"] == 3
    assert "window" in read_layer(folder, 0).origin
    monkeypatch.setitem(families.FAMILIES, "slider", replace(families.LLAMA,
                                                             model_type="slider"))
    assert "window" not in read_layer(folder, 0).settings


def test_a_record_may_refuse_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _renamed(tmp_path, "llama3", "picky", odd_attention=True)
    monkeypatch.setitem(families.FAMILIES, "picky", Family(
        "picky", refused=(("odd_attention", "an attention mha does not compute"),)))
    with pytest.raises(MhaError, match="odd_attention is true: an attention mha does not"):
        read_layer(folder, 0)


def test_a_gated_attention_reads_a_gate_from_each_heads_rows(tmp_path: Path) -> None:
    """Qwen3-Next's q_proj gives each head's queries and then its gate: a q_proj of only
    queries (a Qwen 3's, renamed) is refused saying what the rows should be."""
    folder = _renamed(tmp_path, "qwen3", "qwen3_next")
    with pytest.raises(MhaError, match=r"model\.layers\.0\.self_attn\.q_proj\.weight has "
                       r"\d+ rows, not \d+ × \d+ × 2 \(each head's queries and its gate\)"):
        read_layer(folder, 0)


def test_an_approximation_of_softmax_attention_is_refused_for_good(tmp_path: Path) -> None:
    from mhacli.models.layer import NotAttention

    folder = _renamed(tmp_path, "bert", "nystromformer")
    with pytest.raises(NotAttention, match="layer 1 is the Nyström approximation of softmax "
                       "attention .*; this model has no softmax attention layer"):
        read_layer(folder, 1)


def test_every_record_is_read_by_its_own_layout() -> None:
    """Each record's reading is the shared one unless its tensors are laid out another
    way; the Llama line's records name no reading of their own."""
    for record in families.RECORDS:
        if record.model_type in ("llama4_text", "diffllama", "qwen4_exp_text", "dory", "beam",
                                 "laguna", "doge", "inkling_text") or record.read is drafter:
            # (Llama 4, DiffLlama, Qwen4-Exp, Dory, Beam, Laguna, Doge: the Llama line's
            # reading, then their own; Inkling: its own, on the Llama line's names; a
            # drafter: its queries' and output's, the keys and values given as stored)
            assert record.read is not None and record.tensors == "decoder"
        elif record.tensors in ("decoder", "phi3", "persimmon", "mixer", "modernbert", "attn",
                                "distilbert", "xlm", "ctrl", "temporal_block", "gte") or \
                record.model_type in ("exaone", "sarvam_moe"):
            assert record.read is None, record.model_type
            assert record.layer.__func__ is Family.layer  # type: ignore[attr-defined]
        else:
            assert record.read is not None and record.read is not decoder


# -- the table of families in docs/reference.md is made from the records -----------------

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"
BEGIN = ("<!-- the families: made from mhacli/models/families.py "
         "(python -m tests.test_family_records) -->")
END = "<!-- end of the families -->"


def family_table() -> str:
    """The Markdown table of the families mha reads, one row a record: its model_type (and
    the model types read as it), what its attention has as the record says, and the
    version of mha that first read it."""
    aliases: dict[str, list[str]] = {}
    for alias, name in families.ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    rows = ["| model_type | what its attention has | since |", "|---|---|---|"]
    for record in sorted(families.RECORDS, key=lambda f: f.model_type):
        name = f"`{record.model_type}`" + "".join(f", `{a}`" for a in aliases.get(
            record.model_type, []))
        rows.append(f"| {name} | {'; '.join(features(record))} | {record.since} |")
    return "\n".join(rows)


def test_the_references_table_of_families_is_the_records() -> None:
    text = REFERENCE.read_text()
    assert BEGIN in text and END in text, "docs/reference.md has lost its table of families"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert table == family_table(), "the table of families differs from the records: " \
        "write `python -m tests.test_family_records`'s output between its markers"


def test_every_record_says_what_its_attention_has() -> None:
    for record in families.RECORDS:
        said = features(record)
        assert said and all(said), record.model_type
        assert record.since in ("0.1", "0.2"), record.model_type


if __name__ == "__main__":
    print(BEGIN, family_table(), END, sep="\n\n")


def test_the_reference_counts_the_model_types_read() -> None:
    """docs/reference.md says how many model types the records read (the README points
    there rather than repeating a number that moves)."""
    count = len(families.RECORDS) + len(families.ALIASES)
    assert f"{count} model types have a record" in REFERENCE.read_text()
