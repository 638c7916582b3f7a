"""One reader per setting: the same bad value — written in a problem file, typed as an
option, passed to the API, or (for what a model's config gives) found in a config.json —
is told in the same words, only the place it was given said around them (the file and
line, ``--window``, the config's key). And the settings table accounts for every field
of a problem's Config and Prepared."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine.config import DERIVED, Config, Prepared
from mhacli.engine.settings import SETTINGS, read_setting
from mhacli.errors import MhaError

runner = CliRunner()
MODELS = Path(__file__).parent / "fixtures" / "models"
EYE = [[1, 0], [0, 1]]
FILE = "x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\n" \
       "w_v: [[1, 0], [0, 1]]\n"

# setting, the bad value as a person writes it (a file's text, an option's), as the API
# is given it, and mha's one wording of the mistake
CASES: list[tuple[str, str, Any, str]] = [
    ("heads", "0", 0, "heads must be a whole number of 1 or more, got 0"),
    ("heads", "two", "two", "heads must be a whole number of 1 or more, got 'two'"),
    ("heads", "1.5", 1.5, "heads must be a whole number of 1 or more, got 1.5"),
    ("kv_heads", "0", 0, "kv_heads must be a whole number of 1 or more, got 0"),
    ("window", "0", 0, "window must be a whole number of 1 or more, got 0"),
    ("window", "-3", -3, "window must be a whole number of 1 or more, got -3"),
    ("window", "wide", "wide", "window must be a whole number of 1 or more, got 'wide'"),
    ("splits", "0", 0, "splits must be a whole number of 1 or more, got 0"),
    ("softcap", "0", 0, "softcap must be a positive number, got 0"),
    ("softcap", "-2.5", -2.5, "softcap must be a positive number, got -2.5"),
    ("scale", "-1", -1, "scale must be a positive number, got -1"),
    ("scale", "big", "big", "scale must be dk, n, none or a positive number, got 'big'"),
    ("mask", "sideways", "sideways",
     "mask must be none, causal or an n × m matrix of 1/0, got 'sideways'"),
    ("mask", "casual", "casual",
     "mask must be none, causal or an n × m matrix of 1/0, got 'casual' (did you mean "
     "causal?)"),
    ("key_padding", "1 2", "1 2", "key_padding[2] is '2': expected 1 (may attend) or 0 "
     "(blocked)"),
    ("sinks", "a b", "a b", "sinks[1] is 'a': expected a number (an integer, a decimal, "
     "1e-3 or a fraction such as 1/3)"),
    ("rope", "sideways", "sideways", "rope style must be half, interleaved or half-reversed, "
     "got 'sideways'"),
    ("qk_norm", "depth", "depth", "qk_norm over must be head (each head's d_k numbers) or "
     "width (the whole row, every head), got 'depth'"),
    ("tiles", "0", 0, "tiles takes BR or BR:BC, whole numbers of 1 or more (BR query rows "
     "and BC keys a tile; a file may write [BR, BC]), got 0"),
    ("decode", "2", 2, "decode must be true or false, got 2"),
]
IDS = [f"{key}={text}" for key, text, _, _ in CASES]
NEEDS = {"splits": {"decode": True}}  # what the setting goes with, given too
EXPLAIN_ONLY = ("tiles", "splits")  # the options only explain and generate offer
FLAGS = ("decode",)  # an option that takes no value: nothing to misread


def _message_of_api(key: str, value: Any) -> str:
    with pytest.raises(MhaError) as err:
        mhacli.attention(EYE, EYE, EYE, EYE, **{key: value, **NEEDS.get(key, {})})
    return err.value.message


@pytest.mark.parametrize("key, text, value, words", CASES, ids=IDS)
def test_the_api_and_the_reader_say_it_in_the_one_wording(key: str, text: str, value: Any,
                                                          words: str) -> None:
    assert _message_of_api(key, value) == words
    assert _message_of_api(key, text) == words  # the same value as text: the same words
    with pytest.raises(MhaError) as err:  # what a model's config reader calls
        read_setting(key, value)
    assert err.value.message == words and err.value.path[0] == key


@pytest.mark.parametrize("key, text, value, words", CASES, ids=IDS)
def test_a_problem_file_says_it_at_its_line(tmp_path: Path, key: str, text: str,
                                            value: Any, words: str) -> None:
    path = tmp_path / "p.yaml"
    extra = "".join(f"{k}: {str(v).lower()}\n" for k, v in NEEDS.get(key, {}).items())
    path.write_text(FILE + extra + f"{key}: {text}\n")
    r = runner.invoke(app, ["run", str(path)])
    line = 5 + len(NEEDS.get(key, {}))
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {path}, line {line}, "), r.stderr
    assert r.stderr.endswith(f": {words}\n"), r.stderr


@pytest.mark.parametrize("key, text, value, words",
                         [c for c in CASES if c[0] not in FLAGS],
                         ids=[i for c, i in zip(CASES, IDS) if c[0] not in FLAGS])
def test_an_option_says_it_after_its_name(key: str, text: str, value: Any,
                                          words: str) -> None:
    command = "explain" if key in EXPLAIN_ONLY else "run"
    extra = ["--decode"] if key in NEEDS else []
    r = runner.invoke(app, [command, *extra, "--" + key.replace("_", "-"), text])
    assert r.exit_code == 2 and r.stderr == f"Error: --{key.replace('_', '-')}: {words}\n", \
        r.stderr


# a model's config.json (Gemma 2's: every one of these settings is read from it)
CONFIG_CASES = [
    ("heads", "num_attention_heads", 0, "heads must be a whole number of 1 or more, got 0"),
    ("heads", "num_attention_heads", "two",
     "heads must be a whole number of 1 or more, got 'two'"),
    ("kv_heads", "num_key_value_heads", 0,
     "kv_heads must be a whole number of 1 or more, got 0"),
    ("window", "sliding_window", 0, "window must be a whole number of 1 or more, got 0"),
    ("window", "sliding_window", 2.5, "window must be a whole number of 1 or more, got 2.5"),
    ("softcap", "attn_logit_softcapping", -2.5, "softcap must be a positive number, got -2.5"),
]


@pytest.mark.parametrize("key, config_key, value, words", CONFIG_CASES,
                         ids=[f"{c[1]}={c[2]}" for c in CONFIG_CASES])
def test_a_model_config_says_it_after_its_key(tmp_path: Path, key: str, config_key: str,
                                              value: Any, words: str) -> None:
    folder = tmp_path / "gemma2"
    shutil.copytree(MODELS / "gemma2", folder)
    config = json.loads((folder / "config.json").read_text())
    config[config_key] = value
    (folder / "config.json").write_text(json.dumps(config))
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--tokens", "2"])
    assert r.exit_code == 2, r.stderr
    assert r.stderr == f"Error: {folder / 'config.json'}: {config_key}: {words}\n", r.stderr
    assert _message_of_api(key, value) == words  # the API's words for the same value


def test_a_value_read_once_is_typed_and_passes_again_as_it_is() -> None:
    """What a reader gives, read again, is itself: prepare takes typed values as they are."""
    for key, value in (("heads", "2"), ("window", "+3"), ("softcap", "2.5"), ("scale", "1/2"),
                       ("mask", "1 0;1 1"), ("tiles", "2:1"), ("decode", "yes"),
                       ("dtype", "float32"), ("masked_row", "NaN"), ("layout", "Columns")):
        typed = read_setting(key, value)
        again = read_setting(key, typed)
        assert np.array_equal(again, typed) and type(again) is type(typed), key


# --------------------------------------------------------------------------- the table


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_field_of_config_and_prepared_is_a_setting_s_or_listed_as_derived() -> None:
    filled: dict[str, str] = {}
    for s in SETTINGS:
        for name in s.fields:
            assert name in _fields(Config) | _fields(Prepared), (s.key, name)
            assert name not in filled, f"{name} is filled by {filled[name]} and {s.key}"
            filled[name] = s.key
    assert len(set(DERIVED)) == len(DERIVED), "a derived field listed twice"
    assert not set(DERIVED) & set(filled), set(DERIVED) & set(filled)
    assert _fields(Config) | _fields(Prepared) == set(DERIVED) | set(filled), \
        (_fields(Config) | _fields(Prepared)) ^ (set(DERIVED) | set(filled))


def test_each_parser_fills_exactly_its_setting_s_fields() -> None:
    p = mhacli.engine.prepare(np.eye(4), np.eye(4), np.eye(4), np.eye(4), heads=2)
    from mhacli.engine.config import Sizes

    sizes = Sizes(4, 4, 2, 2, 2, 2, 4, np.float64, p.x, None)
    for s in SETTINGS:
        if s.parse is not None and s.engine:
            config, arrays = s.parse(None if s.default is None else s.read(s.default), sizes)
            assert set(config) | set(arrays) == set(s.fields), s.key


def test_the_field_check_can_fail() -> None:
    """A field no setting fills and no list names is caught (as the test above counts)."""
    extra = dataclasses.make_dataclass("Extra", [("stray", int, dataclasses.field(default=0))],
                                       bases=(Config,), frozen=True)
    assert _fields(extra) - set(DERIVED) - {n for s in SETTINGS for n in s.fields} == {"stray"}
