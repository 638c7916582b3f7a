"""``explain --all-heads``: every head of a layer, or of every layer, at a glance."""

# No `from __future__ import annotations`: this module sits beside Typer's commands.

import sys
from pathlib import Path
from typing import Any, Optional

from ..errors import MhaError
from .common import about, problem
from .terminal import console_for_stdout, export_console, page, rich_stdout, save


def all_heads(fmt: str, options: dict[str, Any], layer: Any, settings: dict[str, Any],
              svg: Optional[Path], html: Optional[Path], pager: bool, sink: Any = None,
              too_large: Any = None) -> None:
    """Each layer's problem (one forward pass of the model for a text), each head's
    weights made one at a time, summarised and drawn."""
    from ..engine import lean_trace
    from ..present import overview
    from ..present.text import config_dict

    if fmt not in ("rich", "plain", "json", "markdown", "html"):
        raise MhaError("--all-heads draws the heads as small heat maps: --format rich, plain, "
                       "markdown, json or html")
    problems = _problems(options, layer, settings)
    if fmt == "html":  # the page: each head's map opens to its weights, entries and all
        return _page(problems, sink, options.get("layout") or "rows", too_large)
    layers = []
    for prob in problems:
        with about(prob):
            tr = lean_trace(prob.prepared)
        # a model's layer is titled by its number; any other problem by where it came from
        number = prob.read.get("layer")
        name = f"layer {number}" if number is not None else prob.source
        layers.append(overview.Layer(name, overview.heads_of(tr, number)))
    first = problems[0]
    text = first.read.get("text")
    queries, keys = first.labels()
    if fmt == "json":
        config = config_dict(first.config, queries, keys, first.layout, first.read)
        sys.stdout.write(overview.as_json(layers, config))
        return
    if fmt == "rich" and rich_stdout():
        console, _ = console_for_stdout(record=bool(svg or html))
        if console.is_terminal and pager:
            with console.capture() as captured:
                overview.show(layers, console, queries, keys, text)
            page(captured.get(), console.height)
        else:
            overview.show(layers, console, queries, keys, text)
    else:
        from ..present.explain import PIPE_WIDTH

        fence = fmt == "markdown"
        sys.stdout.write("```\n" if fence else "")
        for piece in overview.plain(layers, PIPE_WIDTH, queries, keys, text):
            sys.stdout.write(piece)
        sys.stdout.write("```\n" if fence else "")
    if svg or html:
        recorder = export_console()
        overview.show(layers, recorder, queries, keys, text)
        save(recorder, svg, html)


def _problems(options: dict[str, Any], layer: Any, settings: dict[str, Any]) -> list:
    """The problem of each layer shown: ``--layer all`` takes every layer of the
    checkpoint (a text read once), else the one problem the options name."""
    if layer != "all":
        return [problem(**options, layer=layer, **settings)]
    checkpoint, text = options.get("checkpoint"), options.get("text")
    if checkpoint is None:
        raise MhaError("--layer all shows every layer of a model: give --checkpoint MODEL")
    from ..models.layer import layers

    every = layers(checkpoint)
    if text is not None:
        from ..io.choose import option_values
        from ..io.on_model import load_text_layers

        return load_text_layers(checkpoint, text, every, layout=options.get("layout") or "rows",
                                **option_values(settings))
    if options.get("seed") is None:  # one seed: every layer on the same tokens
        from ..io.choose import new_seed

        options = {**options, "seed": new_seed()}
    return [problem(**options, layer=k, **settings) for k in every]


def _page(problems: list, sink: Any, layout: str, too_large: Any) -> None:
    """The page of every layer's heads: each layer traced whole (its weights' arithmetic
    reads the masked scores and the softmax's parts), refused past the size rule."""
    from ..engine import traced
    from ..present import overview
    from ..present.heads_page import heads_page

    layers = []
    for prob in problems:
        if too_large(prob.config):
            raise MhaError("the page holds every stage of each layer: this problem is too "
                           "large for it (fewer tokens, or --format plain)")
        with about(prob):
            tr = traced(prob.prepared)
        number = prob.read.get("layer")
        name = f"layer {number}" if number is not None else prob.source
        layers.append((name, tr, overview.heads_of(tr, number), prob.labels()))
    first = problems[0]
    read = first.read
    header = [f"{read['checkpoint']} ({read['family']})"] if "checkpoint" in read else []
    text = read.get("text")
    if text is not None:
        header.append(f"text: {text}")
    sink.write(heads_page(layers, header, layout))
    sink.close()
