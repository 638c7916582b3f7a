"""The command line's half of the settings table: for each setting of
``engine/settings.py`` (which keeps its key, how it is read, checked, written and shown),
the option that gives it — which commands offer it, its metavar, its help and the panel
of ``--help`` it is listed under. The option is named after the key (``--kv-heads``) and
typed after the setting's kind (a whole number, a flag, a choice of words).
"""

from __future__ import annotations

from dataclasses import dataclass

# the panels of --help, in the order they are shown
PROBLEM, VARIANTS, SHOW, OUTPUT, CHECKING, ADVANCED = (
    "Problem", "Variants of attention", "What to show", "Output", "Checking", "Advanced")
PANELS = (PROBLEM, VARIANTS, SHOW, OUTPUT, CHECKING, ADVANCED)
COMPUTING = ("explain", "run", "generate")  # the commands that compute a problem


@dataclass(frozen=True)
class SettingOption:
    """A setting's option: the commands that offer it, and how their help shows it."""

    key: str  # the setting's key in engine/settings.py
    help: str  # one sentence or two, for --help
    panel: str = VARIANTS
    metavar: str | None = None
    commands: tuple[str, ...] = COMPUTING

    @property
    def flag(self) -> str:
        """The option as typed: ``--kv-heads``."""
        return "--" + self.key.replace("_", "-")


OPTIONS: tuple[SettingOption, ...] = (
    SettingOption("heads", "Number of heads (with a problem file: overrides its heads).",
                  PROBLEM),
    SettingOption("scale", "Divisor of the scores: dk (√d_k, the paper), n (√keys), none, "
                  "or a number.", PROBLEM),
    SettingOption("mask", "none, causal, or rows of 1/0 such as '1 0;1 1' (1 = may attend).",
                  PROBLEM),
    SettingOption("dtype", "Working precision.", ADVANCED, commands=("explain", "run")),
    SettingOption("softcap", "Soft-cap the scaled scores: each becomes C·tanh(z / C) "
                  "(Gemma 2).", metavar="C"),
    SettingOption("kv_heads", "Grouped-query attention: G key/value heads, each shared by "
                  "H/G consecutive query heads (1: multi-query).", metavar="G"),
    SettingOption("window", "Sliding window: query i sees key j only if |i − j| < W (with "
                  "causal: the W keys up to i).", metavar="W"),
    SettingOption("alibi", "ALiBi: add −slope_h·|i − j| to the scores, slopes 2^(−8h/H) for "
                  "H a power of two, else ALiBi's own rule (the key alibi: in a file may "
                  "give H slopes)."),
    SettingOption("bias", "Add a matrix to the scores: n × m or H × n × m, from .npy, or "
                  "YAML/JSON holding the matrix (or a bias: key).", metavar="FILE"),
    SettingOption("key_padding", "One 1/0 per key: 0 marks a padding key, blocked for every "
                  "query.", metavar="'1 1 0'"),
    SettingOption("sinks", "Attention sinks: one extra logit per head in the softmax, its "
                  "weight dropped (gpt-oss).", metavar="'s1 s2 …'"),
    SettingOption("rope", "Rotary embedding of each head's queries and keys: pairs "
                  "(i, i + d/2) as Llama (half) or (2i, 2i+1) as GPT-J (interleaved); base, "
                  "dims, scaling (linear, dynamic, llama3, yarn, longrope) or the "
                  "frequencies themselves in a file's rope: key.",
                  metavar="half|interleaved"),
    SettingOption("positional", "Add positional encodings to the inputs: the paper's "
                  "sinusoids, or a learned table (.npy, YAML or JSON).",
                  metavar="sinusoidal|FILE"),
    SettingOption("qk_norm", "Normalise each query and key by its root mean square before "
                  "RoPE (Qwen 3, OLMo 2, Gemma 3): over each head's d_k numbers (head) or "
                  "the whole row (width); eps and weights in a file's qk_norm: key.",
                  metavar="head|width"),
    SettingOption("masked_row", "A query row whose every key is blocked: zero weights (with "
                  "a warning), nan, or error.", ADVANCED,
                  commands=("explain", "run", "check")),
    SettingOption("layout", "rows: tokens are rows (Q = X·W_Q); columns: tokens are columns "
                  "(Q = W_Q·X). How a file without a layout: key was written, and how "
                  "matrices are shown.", SHOW, commands=("explain", "check", "generate")),
    SettingOption("tiles", "Show FlashAttention's online softmax: each head's queries in "
                  "blocks of BR rows meeting its keys in blocks of BC (BC = BR by default).",
                  SHOW, metavar="BR[:BC]", commands=("explain", "generate")),
    SettingOption("decode", "Show decoding with a KV cache, a token a step (causal "
                  "self-attention).", SHOW, commands=("explain", "generate")),
    SettingOption("splits", "With --decode: each step's cache cut into S chunks, their "
                  "partial softmaxes and their log-sum-exp combination (split-K, "
                  "flash-decoding).", SHOW, metavar="S", commands=("explain", "generate")),
)
