"""Tokens as a person reads them.

A model's tokenizer spells its tokens in its own code: byte-level BPE (GPT-2, Llama 3)
writes each byte as a printable character (``Ġ`` a space, ``âĤ¬`` the three bytes of €),
SentencePiece (Llama 2, Gemma) writes a space as ``▁`` and a byte it has no piece for as
``<0xE2>``, WordPiece (BERT) marks a piece inside a word with ``##``. ``pieces`` turns each
token back into the bytes it stands for, from the tokenizer's own vocabulary and the
decoder it declares; ``readable`` turns those bytes into labels: the characters a token
holds (``coûte``, ``€``), and for a token that holds only part of a character's UTF-8
bytes, which character and which of its bytes (``€[1/3]``, ``😀[2–4/4]``)."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

_SHOWN = {" ": "␣", "\n": "↵", "\t": "⇥"}
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def labels(tokenizer: Any, ids: Sequence[int], text: str | None = None,
           offsets: Sequence[tuple[int, int]] | None = None) -> list[str]:
    """Each token of ``ids`` as a person reads it (see ``readable``), from ``tokenizer``:
    a transformers tokenizer, or a ``tokenizers.Tokenizer``. Given the ``text`` and each
    token's character ``offsets`` in it, a token the vocabulary does not know says what
    it stands for (``unknown``)."""
    out = readable(pieces(tokenizer, ids))
    unk = _unknown_id(tokenizer)
    if text is not None and offsets is not None and unk is not None:
        out = unknown(out, [int(i) for i in ids], unk, text, offsets)
    return out


def unknown(shown: list[str], ids: list[int], unk: int, text: str,
            offsets: Sequence[tuple[int, int]]) -> list[str]:
    """The unknown token (``<unk>``, ``[UNK]``) labelled by the text it stands for, inside
    its own spelling so that it reads as the model's unknown token and never as a token
    of the vocabulary: ``<unk:é>``, ``[UNK:café]``; several unknown tokens over the same
    characters (the bytes of one, in byte-level BPE) as their parts, ``<unk:€[1/3]>``.
    Where the offsets say nothing (an empty span) it stays as it is."""
    out = list(shown)
    spans = [tuple(int(v) for v in o) for o in offsets]
    k = 0
    while k < len(ids):
        if ids[k] != unk or k >= len(spans) or spans[k][1] <= spans[k][0]:
            k += 1
            continue
        end = k
        while end < len(ids) and ids[end] == unk and end < len(spans) and \
                spans[end] == spans[k]:
            end += 1
        a, b = spans[k]
        covered = "".join(_SHOWN.get(c, _printable(c)) for c in text[a:b])
        head, tail = re.fullmatch(r"(.*?)([\]>|)}]*)", shown[k], flags=re.S).groups()
        for j in range(k, end):
            part = f"[{j - k + 1}/{end - k}]" if end - k > 1 else ""
            out[j] = f"{head}:{covered}{part}{tail}"
        k = end
    return out


def _unknown_id(tokenizer: Any) -> int | None:
    """The id of the tokenizer's unknown token, if it has one."""
    known = getattr(tokenizer, "unk_token_id", None)  # transformers
    if isinstance(known, int):
        return known
    model = getattr(tokenizer, "model", None)  # a tokenizers.Tokenizer
    spelled = getattr(model, "unk_token", None)
    if isinstance(spelled, str) and hasattr(tokenizer, "token_to_id"):
        return tokenizer.token_to_id(spelled)
    return None


# --------------------------------------------------------------------------- bytes


def pieces(tokenizer: Any, ids: Sequence[int]) -> list[bytes | str]:
    """What each token stands for: its bytes, or (a ``str``) a special token's own
    spelling, shown as it is (``<s>``, ``[CLS]``). The scheme is the one the tokenizer
    declares (its decoder and model in ``tokenizer.json``; a Python tokenizer's own
    tables); a tokenizer of no known scheme is asked to decode each token alone."""
    ids = [int(i) for i in ids]
    backend = tokenizer if hasattr(tokenizer, "to_str") else \
        getattr(tokenizer, "backend_tokenizer", None)
    spec = _declared(backend) if backend is not None else {}
    scheme, mark = _scheme(tokenizer, spec)
    extra = backend.get_added_tokens_decoder() if backend is not None else {}
    special = {i for i, t in extra.items() if t.special}
    special |= set(getattr(tokenizer, "all_special_ids", None) or ())
    added = {i for i, t in extra.items() if not t.special}
    if scheme == "decode":
        return _decoded(tokenizer, ids, special)
    spelled = [backend.id_to_token(i) for i in ids] if backend is not None else \
        tokenizer.convert_ids_to_tokens(ids)
    out: list[bytes | str] = []
    for i, token in zip(ids, spelled):
        if token is None:  # an id past the vocabulary
            out.append(f"<{i}>")
        elif i in special:
            out.append(token)
        elif i in added:  # a token added as text: its characters as they are
            out.append(token.encode("utf-8"))
        else:
            out.append(_bytes(token, scheme, mark))
    return out


def _declared(backend: Any) -> dict[str, Any]:
    """What a ``tokenizers.Tokenizer`` declares of its scheme, as ``tokenizer.json`` spells
    it: its decoder, and its model's kind, byte fallback and prefix (read without the
    vocabulary, which may be megabytes; the whole document where the parts cannot be)."""
    try:
        decoder = backend.decoder
        model = backend.model
        return {"decoder": json.loads(decoder.__getstate__()) if decoder is not None else None,
                "model": {"type": type(model).__name__,
                          "byte_fallback": getattr(model, "byte_fallback", False),
                          "continuing_subword_prefix":
                              getattr(model, "continuing_subword_prefix", None)}}
    except Exception:  # (a tokenizers release that keeps them otherwise)
        return json.loads(backend.to_str())


def _scheme(tokenizer: Any, spec: dict[str, Any]) -> tuple[str, str]:
    """``bytes`` (byte-level BPE), ``sentencepiece`` (with its space mark), ``wordpiece``
    (with its prefix) or ``decode`` (none of these), and its mark."""
    decoders = _flat(spec.get("decoder"))
    model = spec.get("model") or {}
    kinds = {d.get("type") for d in decoders}
    if "ByteLevel" in kinds:
        return "bytes", ""
    if "WordPiece" in kinds or model.get("type") == "WordPiece":
        prefix = next((d.get("prefix") for d in decoders if d.get("type") == "WordPiece"),
                      None) or model.get("continuing_subword_prefix") or "##"
        return "wordpiece", prefix
    for d in decoders:
        if d.get("type") == "Metaspace":
            return "sentencepiece", d.get("replacement") or "▁"
        if d.get("type") == "Replace" and d.get("content") == " ":
            pattern = d.get("pattern") or {}
            if isinstance(pattern.get("String"), str) and pattern["String"]:
                return "sentencepiece", pattern["String"]
    if "ByteFallback" in kinds or model.get("byte_fallback"):
        return "sentencepiece", "▁"
    if spec:
        return "decode", ""
    if getattr(tokenizer, "byte_decoder", None):  # a Python tokenizer: its own tables
        return "bytes", ""
    if getattr(tokenizer, "sp_model", None) is not None:
        return "sentencepiece", "▁"
    if getattr(tokenizer, "wordpiece_tokenizer", None) is not None:
        return "wordpiece", "##"
    return "decode", ""


def _flat(decoder: Any) -> list[dict[str, Any]]:
    """A decoder and the decoders of a ``Sequence``, in order."""
    if not isinstance(decoder, dict):
        return []
    if decoder.get("type") == "Sequence":
        return [d for part in decoder.get("decoders") or () for d in _flat(part)]
    return [decoder]


def _byte_chars() -> dict[str, int]:
    """GPT-2's table of a byte as a printable character, reversed: the printable bytes
    stand for themselves, the others for 256 + their rank (0x20, a space, is ``Ġ``)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = {chr(b): b for b in kept}
    others = [b for b in range(256) if b not in chars.values()]
    chars.update({chr(256 + k): b for k, b in enumerate(others)})
    return chars


_BYTES = _byte_chars()


def _bytes(token: str, scheme: str, mark: str) -> bytes:
    if scheme == "bytes":
        return b"".join(bytes([_BYTES[c]]) if c in _BYTES else c.encode("utf-8")
                        for c in token)
    if scheme == "sentencepiece":
        byte = _BYTE_TOKEN.fullmatch(token)
        return bytes([int(byte.group(1), 16)]) if byte else \
            token.replace(mark, " ").encode("utf-8")
    # WordPiece: a piece inside a word carries the prefix; any other begins a word,
    # after a space as the decoder joins them (shown only where it tells words apart)
    if token.startswith(mark) and len(token) > len(mark):
        return token[len(mark):].encode("utf-8")
    return (" " + token).encode("utf-8")


def _decoded(tokenizer: Any, ids: list[int], special: set[int]) -> list[bytes | str]:
    """A tokenizer of no known scheme: each token decoded alone; one that decodes to part
    of a character (U+FFFD) as the vocabulary spells it, which tells the parts apart."""
    out: list[bytes | str] = []
    raw = None
    for k, i in enumerate(ids):
        piece = tokenizer.decode([i])
        if i in special:
            out.append(piece)
        elif "\ufffd" in piece and hasattr(tokenizer, "convert_ids_to_tokens"):
            raw = raw or tokenizer.convert_ids_to_tokens(ids)
            out.append(raw[k])
        else:
            out.append(piece.encode("utf-8"))
    return out


# --------------------------------------------------------------------------- labels


def readable(tokens: Sequence[bytes | str]) -> list[str]:
    """Labels from what each token stands for (``pieces``): the characters it holds; a
    character only partly in it as the character and the share of its UTF-8 bytes
    (``€[1/3]``: the first of three; ``😀[2–4/4]``); a byte that begins no character as
    ``<0xNN>``. A leading space is left out, and shown (``␣Mary``) only where the same word
    also occurs without one; a token of spaces alone is ``␣``, a newline ``↵``, a tab
    ``⇥``; a special token (a ``str``) as it is."""
    parts = _parts(tokens)
    shown: list[tuple[bool, str]] = []  # (a leading space left out, the rest)
    for token, chars in zip(tokens, parts):
        if isinstance(token, str):
            shown.append((False, "".join(_printable(c) for c in token)))
        elif not chars:
            shown.append((False, "∅"))
        elif all(c.isspace() for c in chars) or chars[0] != " ":
            shown.append((False, "".join(_SHOWN.get(c, c) if len(c) == 1 else c
                                         for c in chars)))
        else:
            shown.append((True, "".join(_SHOWN.get(c, c) if len(c) == 1 else c
                                        for c in chars[1:])))
    bare = {text for spaced, text in shown if not spaced}
    return [("␣" if spaced and text in bare else "") + text for spaced, text in shown]


def _parts(tokens: Sequence[bytes | str]) -> list[list[str]]:
    """Each byte token's characters: a whole character as itself (escaped when it would
    not print), a part of one as ``€[1/3]``, a byte of none as ``<0xNN>``. The tokens
    between two special ones are read as one run of bytes, so that a character split
    over tokens is found whole."""
    out: list[list[str]] = [[] for _ in tokens]
    k = 0
    while k < len(tokens):
        if isinstance(tokens[k], str):
            k += 1
            continue
        end = k
        while end < len(tokens) and not isinstance(tokens[end], str):
            end += 1
        run = b"".join(tokens[k:end])  # type: ignore[arg-type]
        chars = _characters(run)
        last = 0
        for j in range(k, end):
            first, last = last, last + len(tokens[j])
            for a, b, ch in chars:
                if b <= first or a >= last:
                    continue
                if ch is None:
                    out[j].append(f"<0x{run[a]:02X}>")
                elif first <= a and b <= last:
                    out[j].append(_printable(ch))
                else:
                    lo, hi = max(a, first) - a + 1, min(b, last) - a
                    share = f"{lo}" if lo == hi else f"{lo}–{hi}"
                    out[j].append(f"{_printable(ch)}[{share}/{b - a}]")
        k = end
    return out


def _characters(data: bytes) -> list[tuple[int, int, str | None]]:
    """``data`` as UTF-8: (start, end, character) for each character, and (i, i + 1,
    None) for each byte that is no part of a valid one."""
    out: list[tuple[int, int, str | None]] = []
    i = 0
    while i < len(data):
        lead = data[i]
        size = 1 if lead < 0x80 else 2 if 0xC2 <= lead < 0xE0 else \
            3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF5 else 0
        if size:
            try:
                out.append((i, i + size, data[i:i + size].decode("utf-8")))
                i += size
                continue
            except UnicodeDecodeError:
                pass
        out.append((i, i + 1, None))
        i += 1
    return out


def _printable(ch: str) -> str:
    """A character as a label may hold it: itself, or escaped (``\\x07``, ``\\u200b``)
    when it would act on a terminal rather than show (the joiners that emoji need aside).
    Spaces, newlines and tabs are kept, to be shown as ``␣ ↵ ⇥`` where they stand alone."""
    if ch.isprintable() or ch in " \n\t\u200c\u200d":
        return ch
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
