"""One attention layer read from an 8B-parameter bfloat16 checkpoint, sharded as it ships.

    python benchmarks/checkpoint_read.py                 # layer 17, 5 warm reads, 1 cold
    python benchmarks/checkpoint_read.py --layer 0 --repeats 3

Builds, in a temporary folder removed afterwards, a checkpoint of Llama-3-8B's shapes
(32 layers, hidden 4096, 32 heads, 8 key/value heads, head_dim 128, intermediate 14336,
vocabulary 128256: 8.03 billion bfloat16 numbers, about 16 GB) in four shards with their
index and config.json, as save_pretrained lays it out (shards of at most 5 GB). The files
are sparse: every header is real and so is the layer to be read (random bytes), every
other tensor is a hole that takes no disk. Then each measurement runs in a fresh child
process: open_checkpoint on the folder, then the layer's q/k/v/o_proj weights read as
float64. It reports the time, the peak resident memory above what the process held
before (VmHWM after clear_refs), and the bytes the process read (/proc/self/io), beside
the layer's own bytes and its shard's size. The cold read comes after the layer's pages
are dropped from the page cache (posix_fadvise DONTNEED).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench import machine  # noqa: E402  (the house's one line about the machine)

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 32, 4096, 32, 8, 128
INTERMEDIATE, VOCAB = 14336, 128256
MAX_SHARD = 5_000_000_000  # save_pretrained's default max_shard_size, "5GB"
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def tensors() -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the model in state-dict order, with PyTorch's (out, in) shapes."""
    kv = KV_HEADS * HEAD_DIM
    out = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN)),
                (p + "self_attn.k_proj.weight", (kv, HIDDEN)),
                (p + "self_attn.v_proj.weight", (kv, HIDDEN)),
                (p + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM)),
                (p + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN)),
                (p + "mlp.up_proj.weight", (INTERMEDIATE, HIDDEN)),
                (p + "mlp.down_proj.weight", (HIDDEN, INTERMEDIATE)),
                (p + "input_layernorm.weight", (HIDDEN,)),
                (p + "post_attention_layernorm.weight", (HIDDEN,))]
    return out + [("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (VOCAB, HIDDEN))]


def build(folder: Path, layer: int, seed: int = 0) -> dict:
    """The sparse checkpoint; only ``layer``'s attention weights are written as data."""
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in tensors():
        nbytes = 2 * int(np.prod(shape))
        if shards[-1] and size + nbytes > MAX_SHARD:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    rng = np.random.default_rng(seed)
    wanted = {f"model.layers.{layer}.self_attn.{p}.weight" for p in ATTENTION}
    weight_map, files = {}, []
    for k, members in enumerate(shards, 1):
        file = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        at = 0
        for name, shape in members:
            nbytes = 2 * int(np.prod(shape))
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + nbytes]}
            at += nbytes
            weight_map[name] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        base = 8 + len(text)
        path = folder / file
        with open(path, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            f.truncate(base + at)  # a hole: no disk taken by the tensors never read
            for name, shape in members:
                if name in wanted:  # real bfloat16 numbers: float32's top 16 bits
                    values = rng.standard_normal(int(np.prod(shape)), np.float32) * 0.02
                    f.seek(base + header[name]["data_offsets"][0])
                    f.write((values.view(np.uint32) >> 16).astype("<u2").tobytes())
            f.flush()
            os.fsync(f.fileno())
        files.append(path)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(2 * int(np.prod(s)) for _, s in tensors())},
         "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "vocab_size": VOCAB, "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}, indent=2))
    return {"shards": files, "layer_shard": folder / weight_map[min(wanted)]}


CHILD = r"""
import json, sys, time
import numpy as np
from mhacli.models.files import open_checkpoint

def status(key):  # KiB
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])

def io():
    return {k: int(v) for k, v in (line.split(": ") for line in open("/proc/self/io"))}

folder, layer = sys.argv[1], int(sys.argv[2])
with open("/proc/self/clear_refs", "w") as f:  # the peak from here on, not the imports'
    f.write("5")
rss, before = status("VmRSS"), io()
start = time.perf_counter()
ck = open_checkpoint(folder)
opened = time.perf_counter()
names = [f"model.layers.{layer}.self_attn.{p}.weight" for p in sys.argv[3:]]
arrays = [ck.read(n) for n in names]
done = time.perf_counter()
after = io()
print(json.dumps({"open": opened - start, "read": done - opened, "rss": rss,
                  "peak": status("VmHWM"), "rchar": after["rchar"] - before["rchar"],
                  "storage": after["read_bytes"] - before["read_bytes"],
                  "numbers": sum(a.size for a in arrays),
                  "finite": all(bool(np.isfinite(a).all()) for a in arrays),
                  "dtypes": sorted({str(a.dtype) for a in arrays})}))
"""


def measure(folder: Path, layer: int) -> dict:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(layer), *ATTENTION],
                         capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out)


def drop_cache(files: list[Path]) -> None:
    """Ask the kernel to forget the files' pages, so that the next read goes to storage."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, default=17)
    ap.add_argument("--repeats", type=int, default=5, help="warm reads (median reported)")
    args = ap.parse_args()
    print(machine())
    mib = lambda n: f"{n / 2**20:,.1f} MiB"  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="mha-ckpt-") as tmp:
        folder = Path(tmp)
        built = build(folder, args.layer)
        sizes = [p.stat().st_size for p in built["shards"]]
        disk = sum(p.stat().st_blocks * 512 for p in folder.iterdir())
        shapes = dict(tensors())
        own = sum(2 * int(np.prod(shapes[f"model.layers.{args.layer}.self_attn.{p}.weight"]))
                  for p in ATTENTION)
        shard = built["layer_shard"].stat().st_size
        print(f"Checkpoint: Llama-3-8B's shapes, bfloat16, {sum(sizes) / 1e9:.2f} GB in "
              f"{len(sizes)} shards ({', '.join(f'{s / 1e9:.2f}' for s in sizes)} GB); "
              f"{mib(disk)} on disk (sparse)")
        print(f"Layer {args.layer}'s q/k/v/o_proj weights: {own // 2:,} numbers, {mib(own)} "
              f"as stored (bfloat16), {mib(own * 4)} as float64; they lie in "
              f"{built['layer_shard'].name} of {mib(shard)}")
        cold = None
        if hasattr(os, "posix_fadvise"):
            drop_cache(built["shards"])
            cold = measure(folder, args.layer)
        warm = [measure(folder, args.layer) for _ in range(args.repeats)]
    first = warm[0]
    assert first["finite"] and first["numbers"] == own // 2 and first["dtypes"] == ["float64"]
    read = statistics.median(w["read"] for w in warm)
    opened = statistics.median(w["open"] for w in warm)
    peak = statistics.median((w["peak"] - w["rss"]) * 1024 for w in warm)
    print(f"open_checkpoint (config, index, {len(sizes)} headers): {opened * 1e3:.1f} ms "
          f"(median of {args.repeats})")
    print(f"Reading the four projections, page cache warm: {read:.3f} s (median of "
          f"{args.repeats}; {own / read / 2**20:,.0f} MiB of bfloat16 a second)")
    if cold is not None:
        print(f"  after the pages were dropped: {cold['read']:.3f} s; "
              f"{mib(cold['storage'])} fetched from storage")
    print(f"Bytes read by the process, open + read: {first['rchar']:,} = "
          f"{first['rchar'] / own:.4f} × the layer's own {own:,}; "
          f"{first['rchar'] / shard:.4f} × its shard's {shard:,}")
    print(f"Peak resident memory above the start: {mib(peak)} = {peak / (own * 4):.3f} × the "
          f"float64 result ({mib(own * 4)}), {peak / own:.2f} × the layer's bfloat16 bytes, "
          f"{peak / shard:.4f} × the shard")


if __name__ == "__main__":
    main()
