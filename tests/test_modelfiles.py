"""Hugging Face checkpoints read as they ship (mhacli.models.files): safetensors files
written here byte by byte (and, where torch and transformers are installed, by their own
writers), read back exactly in every float width; folders, sharded sets, index files, a
Hub cache snapshot of symlinks and .npz; every broken or hostile file refused with one
MhaError naming the file and the key or tensor; only the asked tensor's bytes read."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mhacli.errors import MhaError
from mhacli.models import tensors as tensorfile
from mhacli.models.files import Checkpoint, open_checkpoint

Raw = tuple[str, tuple[int, ...], bytes]  # dtype code, shape, the data's bytes


# --------------------------------------------------------------------------- a writer


def header_bytes(header: dict[str, Any] | bytes) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # padded as the format's writers pad it
    return len(text).to_bytes(8, "little") + text


def safetensors_bytes(tensors: dict[str, Raw], metadata: dict | None = None) -> bytes:
    """A .safetensors file as the format specifies it: tensors packed in the given order."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata is not None else {}
    at = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        at += len(data)
    return header_bytes(header) + b"".join(data for _, _, data in tensors.values())


def write(path: Path, tensors: dict[str, Raw], **kw: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(safetensors_bytes(tensors, **kw))
    return path


def f32(a: Any) -> Raw:
    a = np.asarray(a, dtype="<f4")
    return "F32", a.shape, a.tobytes()


def bits(dtype: str, pattern: list[int] | np.ndarray, shape: tuple[int, ...] | None = None) -> Raw:
    """A tensor given by its numbers' bit patterns (16-bit codes: BF16, F16)."""
    a = np.asarray(pattern, dtype="<u2")
    return dtype, shape or a.shape, a.tobytes()


def sharded(folder: Path, shards: dict[str, dict[str, Raw]], config: dict | None = None) -> Path:
    """A sharded set and its index (and config.json), as save_pretrained lays them out."""
    weight_map = {}
    for file, tensors in shards.items():
        write(folder / file, tensors)
        weight_map |= {name: file for name in tensors}
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return index


def refused(path: Path | str, tensor: str | None = None) -> str:
    """The one-line message of the MhaError that opening (then reading) gives."""
    with pytest.raises(MhaError) as caught:
        checkpoint = open_checkpoint(path)
        if tensor is not None:
            checkpoint.read(tensor)
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text
    return text


RNG = np.random.default_rng(7)
W = RNG.standard_normal((3, 4)).astype(np.float32)


# --------------------------------------------------------------------------- exact reads


def test_bfloat16_bit_patterns_widen_exactly(tmp_path: Path) -> None:
    patterns = [0x3F80, 0xC040, 0x0000, 0x8000, 0x0001, 0x7F7F, 0xFF7F, 0x3EAB]
    expected = [1.0, -3.0, 0.0, -0.0, 2.0 ** -133, 3.3895313892515355e38,
                -3.3895313892515355e38, 0.333984375]
    write(tmp_path / "model.safetensors", {"w": bits("BF16", patterns, (2, 4))})
    got = open_checkpoint(tmp_path).read("w")
    assert got.dtype == np.float64 and got.shape == (2, 4)
    assert got.ravel().tolist() == expected
    assert np.signbit(got.ravel()[3])


def test_float16_bit_patterns_widen_exactly(tmp_path: Path) -> None:
    patterns = [0x3C00, 0xC200, 0x0001, 0x7BFF, 0x3555]
    expected = [1.0, -3.0, 2.0 ** -24, 65504.0, 0.333251953125]
    write(tmp_path / "m.safetensors", {"w": bits("F16", patterns)})
    assert open_checkpoint(tmp_path / "m.safetensors").read("w").tolist() == expected


@pytest.mark.parametrize("dtype, fmt", [("BF16", ">f"), ("F16", ">e")])
def test_every_finite_16_bit_pattern(tmp_path: Path, dtype: str, fmt: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """All 65 536 codes, finite ones read and compared with struct's own decoding; the
    reading goes in small pieces so that a piece boundary falls inside the tensor."""
    codes = np.arange(1 << 16, dtype=np.uint16)
    if dtype == "BF16":
        reference = [struct.unpack(fmt, int(c).to_bytes(2, "big") + b"\0\0")[0] for c in codes]
    else:
        reference = [struct.unpack(fmt, int(c).to_bytes(2, "big"))[0] for c in codes]
    finite = np.isfinite(reference)
    write(tmp_path / "model.safetensors", {"w": bits(dtype, codes[finite])})
    monkeypatch.setattr(tensorfile, "CHUNK", 1000)
    got = open_checkpoint(tmp_path).read("w")
    assert got.tobytes() == np.array(reference)[finite].tobytes()  # -0.0 kept too


def test_float32_and_float64_read_as_stored(tmp_path: Path) -> None:
    d = RNG.standard_normal(5)
    write(tmp_path / "model.safetensors",
          {"w": f32(W), "d": ("F64", d.shape, d.astype("<f8").tobytes()),
           "s": f32(2.5), "empty": f32(np.zeros((0, 3)))})
    ck = open_checkpoint(tmp_path)
    assert np.array_equal(ck.read("w"), W.astype(np.float64))
    assert np.array_equal(ck.read("d"), d)
    assert ck.read("s").shape == () and ck.read("s") == 2.5
    assert ck.read("empty").shape == (0, 3)
    assert (ck.shape("w"), ck.dtype("w"), ck.dtype("d")) == ((3, 4), "F32", "F64")


def test_torch_writer_and_widening_agree(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    save_file = pytest.importorskip("safetensors.torch").save_file
    g = torch.Generator().manual_seed(3)
    tensors = {f"t.{dt}": (torch.randn(7, 5, generator=g) * 100).to(dt)
               for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64)}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    ck = open_checkpoint(tmp_path)
    assert set(ck.names) == set(tensors)
    for name, t in tensors.items():
        assert ck.read(name).tobytes() == t.to(torch.float64).numpy().tobytes(), name


def test_save_pretrained_sharded_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "tiny", max_shard_size="20KB")
    assert (tmp_path / "tiny" / "model.safetensors.index.json").exists()
    for where in (tmp_path / "tiny", tmp_path / "tiny" / "model.safetensors.index.json"):
        ck = open_checkpoint(where)
        assert ck.config["num_key_value_heads"] == 2
        assert ck.config_file == tmp_path / "tiny" / "config.json"
        state = model.state_dict()
        name = "model.layers.1.self_attn.k_proj.weight"
        assert ck.dtype(name) == "BF16" and ck.shape(name) == (16, 32)
        assert Path(ck.source_of(name)).name.startswith("model-0000")
        for n in ck.names:
            assert ck.read(n).tobytes() == state[n].to(torch.float64).numpy().tobytes(), n


# --------------------------------------------------------------------------- layouts


def _two_shards(folder: Path) -> Path:
    return sharded(folder, {
        "model-00001-of-00002.safetensors": {"layers.0.q.weight": f32(W),
                                             "layers.0.norm": bits("BF16", [0x3F80] * 4)},
        "model-00002-of-00002.safetensors": {"layers.1.q.weight": f32(2 * W)}},
        config={"num_attention_heads": 2, "rope_scaling": {"type": "linear", "factor": 2.0}})


def test_sharded_folder_and_index_path(tmp_path: Path) -> None:
    index = _two_shards(tmp_path / "m")
    for where in (tmp_path / "m", index, str(index)):
        ck = open_checkpoint(where)
        assert isinstance(ck, Checkpoint)
        assert ck.names == ("layers.0.q.weight", "layers.0.norm", "layers.1.q.weight")
        assert ck.config["rope_scaling"]["factor"] == 2.0
        assert ck.source_of("layers.1.q.weight") == str(
            tmp_path / "m" / "model-00002-of-00002.safetensors")
        assert np.array_equal(ck.read("layers.1.q.weight"), 2 * W.astype(np.float64))
        assert ck.read("layers.0.norm").tolist() == [1.0] * 4
        assert "layers.0.norm" in ck and "nothing" not in ck


def test_single_file_with_and_without_config(tmp_path: Path) -> None:
    path = write(tmp_path / "a" / "model.safetensors", {"w": f32(W)}, metadata={"format": "pt"})
    ck = open_checkpoint(path)
    assert ck.config == {} and ck.config_file is None and ck.names == ("w",)
    (tmp_path / "a" / "config.json").write_text('{"n_head": 2}')
    assert open_checkpoint(path).config == {"n_head": 2}
    # a folder whose only weights file has another name
    write(tmp_path / "b" / "weights.safetensors", {"w": f32(W)})
    assert open_checkpoint(tmp_path / "b").source_of("w").endswith("weights.safetensors")


def test_hub_cache_snapshot_of_symlinks(tmp_path: Path) -> None:
    """models--org--name/snapshots/<hash>/ holds symlinks into ../../blobs, as the Hub
    cache lays a model out; they are followed, and messages name the snapshot's files."""
    staging = tmp_path / "staging"
    _two_shards(staging)
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(staging.iterdir())):
        file.rename(repo / "blobs" / f"blob{i}")
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", f"blob{i}"))
    ck = open_checkpoint(snapshot)
    assert ck.config["num_attention_heads"] == 2
    assert np.array_equal(ck.read("layers.0.q.weight"), W.astype(np.float64))
    assert ck.source_of("layers.0.q.weight") == str(
        snapshot / "model-00001-of-00002.safetensors")
    blob = (snapshot / "model-00002-of-00002.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[-4:] = np.array([np.nan], "<f4").tobytes()  # a NaN in a blob: the snapshot's file named
    blob.write_bytes(bytes(data))
    assert refused_read(ck, "layers.1.q.weight") == (f"{snapshot / 'model-00002-of-00002.safetensors'}: "
                                 "layers.1.q.weight[3][4] is NaN: a checkpoint's weights "
                                 "must be finite numbers")


def test_npz_checkpoint(tmp_path: Path) -> None:
    np.savez(tmp_path / "w.npz", **{"h.0.attn.c_attn.weight": W, "steps": np.arange(3),
                                    "half": W.astype(np.float16)})
    (tmp_path / "config.json").write_text('{"n_head": 2}')
    ck = open_checkpoint(tmp_path / "w.npz")
    assert ck.config == {"n_head": 2}
    assert np.array_equal(ck.read("h.0.attn.c_attn.weight"), W.astype(np.float64))
    assert ck.read("half").dtype == np.float64 and ck.dtype("half") == "F16"
    assert ck.source_of("steps") == str(tmp_path / "w.npz")
    assert "steps holds I64 numbers" in refused(tmp_path / "w.npz", "steps")
    np.savez(tmp_path / "bad.npz", w=np.array([[1.0, np.inf]]))
    assert refused(tmp_path / "bad.npz", "w").endswith("w[1][2] is infinite: a checkpoint's "
                                                       "weights must be finite numbers")


# --------------------------------------------------------------------------- only its bytes


class _Counting:
    """A file object that counts the bytes read through it."""

    total = 0

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.inner.close()

    def seek(self, *args: Any) -> int:
        return self.inner.seek(*args)

    def readinto(self, buffer: Any) -> int:
        got = self.inner.readinto(buffer)
        _Counting.total += got or 0
        return got

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        _Counting.total += len(data)
        return data


def test_only_the_tensors_own_bytes_are_read(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Its neighbours are NaN and garbage; reading it reads its bytes and nothing more."""
    nan = np.full((64, 64), np.nan, "<f4")
    path = write(tmp_path / "model.safetensors", {
        "before": ("F32", nan.shape, nan.tobytes()),
        "mine": bits("BF16", [0x3F80, 0xC040] * 50, (10, 10)),
        "after": ("F32", (1000,), os.urandom(4000))})
    ck = open_checkpoint(path)
    monkeypatch.setattr(tensorfile, "CHUNK", 7)  # in pieces, none past its end
    monkeypatch.setattr(tensorfile, "open", lambda *a, **k: _Counting(open(*a, **k)),
                        raising=False)
    _Counting.total = 0
    got = ck.read("mine")
    assert _Counting.total == 200
    assert got.ravel().tolist() == [1.0, -3.0] * 50


def test_nan_found_in_a_later_piece_names_its_entry(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    codes = [0x3F80] * 24
    codes[17] = 0xFF80  # −∞: row 3 (of 4 × 6), column 6
    write(tmp_path / "model.safetensors", {"w": bits("BF16", codes, (4, 6))})
    monkeypatch.setattr(tensorfile, "CHUNK", 5)
    assert refused(tmp_path, "w") == (f"{tmp_path / 'model.safetensors'}: w[3][6] is "
                                      "−infinite: a checkpoint's weights must be finite numbers")


def test_file_cut_after_opening(tmp_path: Path) -> None:
    path = write(tmp_path / "model.safetensors", {"a": f32(W), "b": f32(W)})
    ck = open_checkpoint(path)
    os.truncate(path, path.stat().st_size - 10)
    assert "the file ends inside b" in refused_read(ck, "b")
    assert np.array_equal(ck.read("a"), W.astype(np.float64))


def refused_read(ck: Checkpoint, name: str) -> str:
    with pytest.raises(MhaError) as caught:
        ck.read(name)
    return str(caught.value)


# --------------------------------------------------------------------------- hostile: config


DEEP = "[" * 1_000_000 + "]" * 1_000_000


@pytest.mark.parametrize("text, says", [
    ('{"num_attention_heads": 4,', "config.json, line 1, column 27: the config is not valid JSON"),
    ("[1, 2]", "config.json: the config is a list: expected a mapping of settings"),
    ('"heads"', "config.json: the config is text"),
    (DEEP, "config.json: the config is nested more than 64 levels deep"),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "the config is nested more than 64 levels deep"),
    ("[" * 65 + "]" * 65, "config.json: the config is nested more than 64 levels deep"),
    ('{"heads": 4, "heads": 8}', "config.json: the config gives the key 'heads' twice"),
    ('{"n": ' + "1" * 5000 + "}", "config.json: the config is not valid JSON (Exceeds the limit (4300 digits) for "
                                  "integer string conversion)"),
    ("", "config.json, line 1, column 1: the config is not valid JSON (Expecting value)"),
], ids=["broken", "list", "text", "deep-lists", "deep-maps", "deep-65", "duplicate", "digits",
        "empty"])
def test_broken_config(tmp_path: Path, text: str, says: str) -> None:
    write(tmp_path / "model.safetensors", {"w": f32(W)})
    (tmp_path / "config.json").write_text(text)
    assert says in refused(tmp_path)


def test_config_edges(tmp_path: Path) -> None:
    write(tmp_path / "model.safetensors", {"w": f32(W)})
    deep_text = {"note": "[" * 5000 + "{" * 5000, "quoted": '\\"' + "[" * 100 + '"',
                 "nested": [[[[{"a": [1]}]]]]}
    (tmp_path / "config.json").write_text(json.dumps(deep_text))  # brackets inside text
    assert open_checkpoint(tmp_path).config == deep_text
    text = '{"a": ' + "[" * 63 + "]" * 63 + "}"  # 64 levels: as deep as accepted
    (tmp_path / "config.json").write_text(text)
    assert open_checkpoint(tmp_path).config == json.loads(text)
    (tmp_path / "config.json").write_bytes(b'{"a": "\xff"}')
    assert "config.json: the config is not UTF-8 text (byte 8)" in refused(tmp_path)
    os.truncate(tmp_path / "config.json", 17 << 20)  # sparse: never read
    assert "config.json: the config is 17825792 bytes: more than 16777216" in refused(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").symlink_to(tmp_path / "gone.json")
    assert refused(tmp_path) == f"{tmp_path / 'config.json'}: no such file"
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").mkdir()
    assert refused(tmp_path) == f"{tmp_path / 'config.json'}: is a directory, not a file"


# --------------------------------------------------------------------------- hostile: index


def _index(folder: Path, weight_map: Any, extra: str | None = None) -> Path:
    """A folder whose one real shard holds a.weight; the index as given."""
    write(folder / "model-00001-of-00001.safetensors", {"a.weight": f32(W)})
    index = folder / "model.safetensors.index.json"
    index.write_text(extra if extra is not None else json.dumps({"weight_map": weight_map}))
    return index


@pytest.mark.parametrize("weight_map, says", [
    ({"a.weight": "../outside.safetensors"},
     "its weight_map puts a.weight in '../outside.safetensors': only files inside the "
     "model's folder may be named (no '..', no absolute path)"),
    ({"a.weight": "sub/../../outside.safetensors"}, "only files inside the model's folder"),
    ({"a.weight": "ABSOLUTE"}, "only files inside the model's folder"),
    ({"a.weight": "..\\outside.safetensors"}, "only files inside the model's folder"),
    ({"a.weight": "C:model.safetensors"}, "only files inside the model's folder"),
    ({"a.weight": 3}, "its weight_map puts a.weight in 3: expected the name of a file in the "
                      "model's folder"),
    ({"a.weight": None}, "puts a.weight in None"),
    ({"a.weight": ""}, "puts a.weight in ''"),
    ({"a.weight": "model-00002-of-00002.safetensors"},
     "its weight_map puts a.weight in model-00002-of-00002.safetensors, but the folder has no "
     "such file"),
    ({"a.weight": "model-00001-of-00001.safetensors",
      "b.weight": "model-00001-of-00001.safetensors"},
     "its weight_map puts b.weight in model-00001-of-00001.safetensors, whose header does not "
     "hold it"),
    ([["a.weight", "model-00001-of-00001.safetensors"]],
     "its weight_map is [['a.weight', 'model-00001-of-00001.saf…: expected a mapping of "
     "tensor names to shard files"),
], ids=["dotdot", "dotdot-inside", "absolute", "backslash", "drive", "number", "null", "empty",
        "missing", "not-there", "list"])
def test_hostile_index(tmp_path: Path, weight_map: Any, says: str) -> None:
    outside = write(tmp_path / "outside.safetensors", {"a.weight": f32(W)})  # never opened
    folder = tmp_path / "model"
    if weight_map == {"a.weight": "ABSOLUTE"}:
        weight_map = {"a.weight": str(outside)}
    index = _index(folder, weight_map)
    for where in (folder, index):
        text = refused(where)
        assert text.startswith(f"{index}: ") and says in text


@pytest.mark.parametrize("text, says", [
    ("{", "the index is not valid JSON (Expecting property name enclosed in double quotes)"),
    ("[]", "the index is a list: expected a mapping with a weight_map"),
    ('{"metadata": {}}', "its weight_map is missing"),
    (DEEP, "the index is nested more than 64 levels deep"),
    ('{"weight_map": {"a.weight": "x", "a.weight": "y"}}', "gives the key 'a.weight' twice"),
])
def test_broken_index(tmp_path: Path, text: str, says: str) -> None:
    index = _index(tmp_path, None, extra=text)
    message = refused(index)
    assert message.startswith(str(index)) and says in message


def test_index_too_large(tmp_path: Path) -> None:
    index = _index(tmp_path, {"a.weight": "model-00001-of-00001.safetensors"})
    os.truncate(index, 65 << 20)  # sparse: never read
    assert refused(tmp_path) == f"{index}: the index is 68157440 bytes: more than 67108864 " \
                                "(the limit for one)"


def test_index_naming_a_device_or_a_pipe(tmp_path: Path) -> None:
    index = _index(tmp_path, {"a.weight": "fifo.safetensors"})
    os.mkfifo(tmp_path / "fifo.safetensors")  # never opened: it would wait for a writer
    assert refused(index) == f"{tmp_path / 'fifo.safetensors'}: is not a regular file (a " \
                             "device or a pipe?), so it is not read"
    (tmp_path / "zero.safetensors").symlink_to("/dev/zero")
    index.write_text(json.dumps({"weight_map": {"a.weight": "zero.safetensors"}}))
    assert "zero.safetensors: is not a regular file" in refused(index)


# --------------------------------------------------------------------------- hostile: shards


def _entry(dtype: str = "F32", shape: Any = (2,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}


@pytest.mark.parametrize("header, data, says", [
    ({"w": _entry("F12")}, 8, "w has the dtype 'F12', which the format does not define"),
    ({"w": _entry(shape=(-2,))}, 8, "w has the shape [-2]: expected a list of whole numbers"),
    ({"w": _entry(shape=[True, 2])}, 8, "w has the shape [True, 2]"),
    ({"w": _entry(shape="2")}, 8, "w has the shape '2'"),
    ({"w": _entry(offsets=(8, 0))}, 8, "w has the data_offsets [8, 0]: expected [begin, end]"),
    ({"w": _entry(offsets=[0, 8, 9])}, 8, "w has the data_offsets [0, 8, 9]"),
    ({"w": _entry(offsets=(0, 12))}, 12,
     "w is F32 of shape (2,): 8 bytes, but its data_offsets [0, 12] span 12"),
    ({"w": _entry("F4", shape=(3,), offsets=(0, 1))}, 1, "w is F4 of shape (3,): 1.5 bytes"),
    ({"w": {"dtype": "F32", "shape": [2]}}, 8,
     "w is described as {'dtype': 'F32', 'shape': [2]}: expected exactly dtype, shape and "
     "data_offsets"),
    ({"w": _entry() | {"extra": 1}}, 8, "w is described as {'dtype': 'F32', 'shape': [2], "
                                        "'data_of…: expected exactly dtype, shape and "
                                        "data_offsets"),
    ({"w": [1]}, 8, "w is described as [1]"),
    ({"a": _entry(), "b": _entry(offsets=(4, 12))}, 12,
     "b (data_offsets [4, 12]) overlaps a, which ends at 8"),
    ({"a": _entry(), "b": _entry(offsets=(12, 20))}, 20,
     "bytes 8 to 12 of the data belong to no tensor (before b)"),
    ({"b": _entry(offsets=(4, 12))}, 12, "bytes 0 to 4 of the data belong to no tensor"),
    ({"a": _entry(), "b": _entry(offsets=(8, 16))}, 12,
     "b ends at byte 16 of the data, but the file holds only 12: the file is truncated"),
    ({"w": _entry()}, 20, "the file holds 12 bytes after its last tensor (w) that its header "
                          "does not describe"),
    ({}, 4, "the file holds 4 bytes of data, but its header describes no tensor"),
    ({"__metadata__": {"format": 1}, "w": _entry()}, 8,
     "its __metadata__ is {'format': 1}: expected a mapping of text to text"),
    ({"__metadata__": [], "w": _entry()}, 8, "its __metadata__ is []"),
], ids=["dtype", "negative", "bool", "shape-text", "backwards", "three-offsets", "mismatch",
        "half-byte", "missing-key", "extra-key", "not-a-mapping", "overlap", "gap", "gap-first",
        "truncated", "trailing", "no-tensor", "metadata", "metadata-list"])
def test_hostile_header(tmp_path: Path, header: dict, data: int, says: str) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(header_bytes(header) + bytes(data))
    assert refused(tmp_path).startswith(f"{path}: {says}")


@pytest.mark.parametrize("raw, says", [
    (b"\x10\x00", "the file is 2 bytes: too short for .safetensors (8 bytes of header "
                  "length, then the header)"),
    ((1 << 40).to_bytes(8, "little") + b"{}", "its header length says 1099511627776 bytes: "
                                              "more than the format allows (100000000); "
                                              "not .safetensors, or damaged"),
    ((64).to_bytes(8, "little") + b"{}", "its header length says 64 bytes, but only 2 follow: "
                                         "the file is truncated, or not .safetensors"),
    (header_bytes(b"{nope"), "the header is not valid JSON (Expecting property name enclosed "
                             "in double quotes at character 2)"),
    (header_bytes(b"[]"), "its header is not a JSON object: not .safetensors, or damaged"),
    (header_bytes(b'{"w": 1, "w": 2}'), "the header gives the key 'w' twice"),
    (header_bytes(b'{"a": ' + b"[" * 500 + b"]" * 500 + b"}"),
     "the header is nested more than 64 levels deep"),
    (header_bytes(b'{"a": ' + b"[" * 10**6 + b"]" * 10**6 + b"}"),
     "the header is nested more than 64 levels deep"),
    (header_bytes(b'{"w": "\xc3"}'), "the header is not UTF-8 text (byte 8)"),
], ids=["short", "huge-length", "length-past-end", "not-json", "list", "duplicate", "deep",
        "deeper", "not-utf8"])
def test_hostile_header_bytes(tmp_path: Path, raw: bytes, says: str) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(raw)
    assert refused(path) == f"{path}: {says}"


def test_unterminated_string_of_escapes_is_refused_at_once(tmp_path: Path) -> None:
    """A header of many brackets, then a string of escaped quotes that never ends: read in
    one pass, not once from every quote (which would take hours)."""
    import time

    path = tmp_path / "model.safetensors"
    path.write_bytes(header_bytes(b'{"a": ' + b"[" * 70 + b'"' + b'\\"' * 2_000_000))
    start = time.perf_counter()
    assert "the header is not valid JSON (Unterminated string" in refused(path)
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize("dtype, code", [("I64", "I64"), ("BOOL", "BOOL"),
                                         ("F8_E4M3", "F8_E4M3"), ("U8", "U8")])
def test_non_float_tensors_listed_but_not_read(tmp_path: Path, dtype: str, code: str) -> None:
    width = tensorfile.DTYPE_BITS[dtype] // 8
    write(tmp_path / "model.safetensors", {"w": f32(W), "ids": (dtype, (4,), bytes(4 * width))})
    ck = open_checkpoint(tmp_path)
    assert ck.names == ("w", "ids") and ck.dtype("ids") == code
    assert refused_read(ck, "ids") == (f"{tmp_path / 'model.safetensors'}: ids holds {code} "
                                       "numbers: only floating-point tensors (F64, F32, F16, "
                                       "BF16) are read")


def test_too_many_numbers_refused_before_reading(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "model.safetensors", {"w": f32(W)})
    monkeypatch.setattr(tensorfile, "MAX_NUMBERS", 11)
    assert "w holds 12 numbers: more than this tool reads in one tensor (11)" in \
        refused(tmp_path, "w")


def test_unknown_tensor_name(tmp_path: Path) -> None:
    write(tmp_path / "model.safetensors", {"layers.0.q_proj.weight": f32(W)})
    assert refused(tmp_path, "layers.0.q_proj.weigth") == (
        f"{tmp_path / 'model.safetensors'}: layers.0.q_proj.weigth is not a tensor of this "
        "checkpoint (did you mean layers.0.q_proj.weight?)")


# --------------------------------------------------------------------------- hostile: paths


def test_pickled_checkpoints_are_refused(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 a pickle")
    (tmp_path / "config.json").write_text("{}")
    assert refused(tmp_path).startswith(f"{tmp_path}: holds pytorch_model.bin and no "
                                        ".safetensors file: only safetensors checkpoints are "
                                        "read, since loading a pickle can run code")
    assert refused(tmp_path / "pytorch_model.bin").startswith(
        f"{tmp_path / 'pytorch_model.bin'}: is a PyTorch pickle: only safetensors")


@pytest.mark.parametrize("make, says", [
    (lambda p: p, "holds no model.safetensors, no model.safetensors.index.json and no other "
                  ".safetensors file: not a model folder"),
    (lambda p: p / "nothing", "no such file or folder"),
    (lambda p: p / "config.json", "is the model's config: give its folder"),
    (lambda p: p / "weights.h5", "a checkpoint is a model folder, a .safetensors file, its "
                                 "index (model.safetensors.index.json) or an .npz"),
    (lambda p: p / "broken.npz", "not a readable .npz file"),
])
def test_paths_that_are_not_checkpoints(tmp_path: Path, make: Any, says: str) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "weights.h5").write_bytes(b"\x89HDF")
    (folder / "broken.npz").write_bytes(b"PK\x03\x04 not really")
    where = make(folder)
    assert refused(where).startswith(f"{where}: {says}")


def test_several_candidates_need_a_name(tmp_path: Path) -> None:
    write(tmp_path / "a.safetensors", {"w": f32(W)})
    write(tmp_path / "b.safetensors", {"w": f32(W)})
    assert "holds 2 candidates (a.safetensors, b.safetensors)" in refused(tmp_path)
