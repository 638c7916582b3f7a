"""Tokens as a person reads them: byte-level BPE (GPT-2, Llama 3), SentencePiece with byte
fallback (Llama 2, Gemma) and WordPiece (BERT), each built here with the tokenizers
library from a vocabulary written by hand, so that the tokens of a text are known
before it is read; and repeated labels told apart. The expected labels are written by
hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mhacli.io.labels import distinct
from mhacli.models.tokens import labels, readable, unknown

MODELS = Path(__file__).parent / "fixtures" / "models"
TEXT = "Ça coûte 5€ 😀"


def _byte_level():  # type: ignore[no-untyped-def]
    """GPT-2's scheme: every byte a character, merges that make ``Ça`` and ``Ġcoûte``
    whole and the first two bytes of € one token; 😀 stays four bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    merges = [("Ã", "ĩ"), ("Ãĩ", "a"), ("Ġ", "c"), ("Ġc", "o"), ("Ã", "»"), ("Ġco", "Ã»"),
              ("t", "e"), ("ĠcoÃ»", "te"), ("â", "Ĥ")]
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece():  # type: ignore[no-untyped-def]
    """Llama 2's scheme: ``▁`` for a space, ``<0xE2>`` for a byte without a piece, and a
    ``<s>`` before the text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    merges = [("▁", "Ç"), ("▁Ç", "a"), ("▁", "c"), ("▁c", "o"), ("▁co", "û"), ("t", "e"),
              ("▁coû", "te")]
    for piece in ["▁", "Ç", "a", "c", "o", "û", "t", "e", "5", *(a + b for a, b in merges)]:
        vocab[piece] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True,
                               unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 1)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def _wordpiece():  # type: ignore[no-untyped-def]
    """BERT's scheme: ``##`` inside a word, ``[CLS]`` and ``[SEP]`` around the text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(["[UNK]", "[CLS]", "[SEP]", "Ça", "co", "##ût", "##e",
                                         "5", "##€", "😀", "e"])}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tok.add_special_tokens(["[UNK]", "[CLS]", "[SEP]"])
    return tok


CASES = {
    "byte-level": (_byte_level, TEXT,
                   ["Ãĩa", "ĠcoÃ»te", "Ġ", "5", "âĤ", "¬", "Ġ", "ð", "Ł", "ĺ", "Ģ"],
                   ["Ça", "coûte", "␣", "5", "€[1–2/3]", "€[3/3]", "␣",
                    "😀[1/4]", "😀[2/4]", "😀[3/4]", "😀[4/4]"]),
    "sentencepiece": (_sentencepiece, TEXT,
                      ["<s>", "▁Ça", "▁coûte", "▁", "5", "<0xE2>", "<0x82>", "<0xAC>", "▁",
                       "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"],
                      ["<s>", "Ça", "coûte", "␣", "5", "€[1/3]", "€[2/3]", "€[3/3]", "␣",
                       "😀[1/4]", "😀[2/4]", "😀[3/4]", "😀[4/4]"]),
    "wordpiece": (_wordpiece, TEXT + " e",
                  ["[CLS]", "Ça", "co", "##ût", "##e", "5", "##€", "😀", "e", "[SEP]"],
                  ["[CLS]", "Ça", "co", "ût", "e", "5", "€", "😀", "␣e", "[SEP]"]),
}


@pytest.mark.parametrize("scheme", list(CASES))
def test_a_text_is_labelled_as_a_person_reads_it(scheme: str) -> None:
    """Whole characters as themselves, part of one as the character and its share of the
    bytes, the space left out where it tells nothing (``␣e``: the word e, beside the e
    that ends coûte); through the tokenizers library and through transformers alike."""
    pytest.importorskip("tokenizers")
    make, text, spelled, expected = CASES[scheme]
    tok = make()
    encoding = tok.encode(text)
    assert encoding.tokens == spelled  # the tokenizer built as meant
    assert labels(tok, encoding.ids) == expected
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    assert labels(fast, fast(text)["input_ids"]) == expected


@pytest.mark.parametrize("family", ["gpt2", "llama3"])
def test_the_fixtures_labels_are_the_vocabularys(family: str) -> None:
    """The labels kept with the fixture texts (for the path without torch) are what the
    fixture's own tokenizer.json gives for the ids kept beside them."""
    tokenizers = pytest.importorskip("tokenizers")
    data = np.load(MODELS / family / "text.npz")
    tok = tokenizers.Tokenizer.from_file(str(MODELS / family / "tokenizer.json"))
    assert labels(tok, [int(i) for i in data["ids"]]) == json.loads(str(data["labels"]))


CAFE = "The café costs 5€ 🙂 and the café is nice"
# the gpt2 fixture's 100 tokens know none of é, 5, €, 🙂: each of their bytes is <unk>
CAFE_LABELS = ["The", "␣", "c", "a", "f", "<unk:é[1/2]>", "<unk:é[2/2]>", "␣", "c", "o", "s",
               "t", "s", "␣", "<unk:5>", "<unk:€[1/3]>", "<unk:€[2/3]>", "<unk:€[3/3]>", "␣",
               "<unk:🙂[1/4]>", "<unk:🙂[2/4]>", "<unk:🙂[3/4]>", "<unk:🙂[4/4]>", "and", "the",
               "␣", "c", "a", "f", "<unk:é[1/2]>", "<unk:é[2/2]>", "␣", "is", "␣", "n", "i",
               "c", "e"]


def test_an_unknown_token_says_which_characters_it_stands_for() -> None:
    """Through the tokenizers library (its Encoding's offsets) and transformers (its
    offset mapping) alike; from the ids alone (no offsets) the token stays <unk>."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(MODELS / "gpt2" / "tokenizer.json"))
    encoding = tok.encode(CAFE)
    assert encoding.tokens.count("<unk>") == 12  # the tokenizer as meant: 12 unknown bytes
    assert labels(tok, encoding.ids, CAFE, encoding.offsets) == CAFE_LABELS
    assert labels(tok, encoding.ids).count("<unk>") == 12
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    got = fast(CAFE, return_offsets_mapping=True)
    assert labels(fast, got["input_ids"], CAFE, got["offset_mapping"]) == CAFE_LABELS


def test_an_unknown_word_is_named_in_the_models_own_spelling() -> None:
    """WordPiece's [UNK] stands for a whole word: [UNK:naïve]."""
    pytest.importorskip("tokenizers")
    tok = _wordpiece()
    encoding = tok.encode("Ça naïve")
    assert encoding.tokens == ["[CLS]", "Ça", "[UNK]", "[SEP]"]
    assert labels(tok, encoding.ids, "Ça naïve", encoding.offsets) == \
        ["[CLS]", "Ça", "[UNK:naïve]", "[SEP]"]


def test_unknown_tokens_from_offsets() -> None:
    """Without any tokenizer: each unknown token by the characters its offsets cover; those
    over the same characters as their parts; spaces and controls shown as labels show
    them; an empty span (no offsets known) leaves the token as it is."""
    text = "a b\x07€"
    shown = ["a", "<unk>", "<unk>", "<unk>", "<unk>", "<unk>", "<|unk|>"]
    ids = [5, 0, 0, 0, 0, 0, 0]
    spans = [(0, 1), (1, 3), (3, 4), (4, 5), (4, 5), (4, 5), (0, 0)]
    assert unknown(shown, ids, 0, text, spans) == \
        ["a", "<unk:␣b>", "<unk:\\x07>", "<unk:€[1/3]>", "<unk:€[2/3]>", "<unk:€[3/3]>",
         "<|unk|>"]
    assert unknown(["<|unk|>"], [0], 0, "é", [(0, 1)]) == ["<|unk:é|>"]


def test_bytes_to_labels() -> None:
    """From the bytes alone: a character split three ways and over a space, a stray byte,
    spaces and newlines, controls escaped, a special token between byte runs."""
    euro = "€".encode()
    assert readable([b"a" + euro[:1], euro[1:2], euro[2:] + b" b"]) == \
        ["a€[1/3]", "€[2/3]", "€[3/3]␣b"]
    assert readable([b" x", b"x", b" y"]) == ["␣x", "x", "y"]
    assert readable([b"\xff", b"  ", b"\n", b"\t", b"a\x07", b"", "<s>", b"\xe6\x97"]) == \
        ["<0xFF>", "␣␣", "↵", "⇥", "a\\x07", "∅", "<s>", "<0xE6><0x97>"]
    # (a character the text does not complete is its bytes: which it is, is unknown)
    # a run ends at a special token: a character is not completed across it
    assert readable([euro[:2], "</s>", euro[2:]]) == ["<0xE2><0x82>", "</s>", "<0xAC>"]


def test_repeated_labels_are_told_apart() -> None:
    assert distinct(["the", "cat", "the", "sat", "the"]) == ["the", "cat", "the₂", "sat", "the₃"]
    assert distinct(["at", "at"] * 6)[-1] == "at₁₂"
    assert distinct(["a", "a", "a₂"]) == ["a", "a₃", "a₂"]  # never another row's label
    assert distinct(["x", "y"]) == ["x", "y"]


# --------------------------------------------------------------------------- where shown


def _mha(*args: str):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from mhacli.cli import app

    return CliRunner().invoke(app, list(args))


def test_a_repeated_token_is_told_apart_wherever_rows_are_shown() -> None:
    """The cat sample's second "the": in a table's rows and columns, a --cell heading,
    the JSON labels and a masked row's warning; the problem keeps its tokens as written,
    and generate writes them so."""
    r = _mha("explain", "--sample", "cat", "--stage", "weights", "--head", "1",
             "--format", "plain")
    lines = r.stdout.splitlines()
    table = lines.index(next(t for t in lines if t.startswith("# weights · head 1 of 2: A")))
    assert lines[table + 1].split() == ["the", "cat", "jumped", "over", "the₂", "lazy", "dog"]
    assert [t.split()[0] for t in lines[table + 2:table + 9]][4] == "the₂"
    r = _mha("explain", "--sample", "cat", "--cell", "weights:1:5:1", "--format", "plain")
    assert "row 5 (the₂), column 1 (the)" in r.stdout
    r = _mha("explain", "--sample", "cat", "--stage", "x", "--format", "json")
    assert json.loads(r.stdout)["config"]["tokens"][4] == "the₂"
    r = _mha("run", "--random", "--tokens", "a b a", "--mask", "1 0 0;0 1 0;0 0 0")
    assert r.stderr.startswith("Warning: query row 3 (a₂): every key is blocked"), r.stderr
    import mhacli

    assert mhacli.load("cat").tokens[4] == "the"
    r = _mha("generate", "--tokens", "the cat the", "--seed", "1")
    assert "tokens: [the, cat, the]" in r.stdout


def test_a_texts_repeated_tokens_are_told_apart() -> None:
    """The fixture's text has John, e and to twice: the rows say John₂, e₂ and to₂,
    the reading keeps the tokens as the model made them."""
    from mhacli.io.on_model import from_reading
    from mhacli.models.text import Reading

    data = np.load(MODELS / "gpt2" / "text.npz")
    kept = json.loads(str(data["labels"]))
    reading = Reading([int(i) for i in data["ids"]], kept, {0: data["x_0"]},
                      {0: data["out_0"]})
    prob = from_reading(MODELS / "gpt2", str(data["text"]), reading, [0])[0]
    rows, cols = prob.labels()
    assert rows == cols == ["Whe", "n", "Mary", "and", "John", "␣", "went", "to", "the", "s",
                            "tor", "e", ",", "John₂", "gav", "e₂", "a", "d", "ri", "nk", "to₂"]
    assert list(prob.tokens) == kept
