"""How far float32 results are from float64, on random problems of several sizes.

    python benchmarks/float32_error.py

Prints, per size, the largest error |out32 − out64| / max(1, |out64|) over 20 seeds.
Inputs are unit-scale (x ~ N(0, 1), weights ~ N(0, 1/d_model)), as in a trained layer.
"""

from __future__ import annotations

import numpy as np

import mhacli


def worst(n: int, d: int, heads: int, mask: str | None, seeds: int = 20) -> float:
    err = 0.0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, d))
        ws = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
        kw = dict(heads=heads, w_o=ws[3], mask=mask)
        out64 = mhacli.attention(x, *ws[:3], **kw)
        out32 = mhacli.attention(x, *ws[:3], **kw, dtype=np.float32)
        err = max(err, float(np.max(np.abs(out32 - out64) / np.maximum(1, np.abs(out64)))))
    return err


if __name__ == "__main__":
    print(f"{'n':>5} {'d_model':>7} {'heads':>5} {'mask':>6}  max relative error of float32")
    for n, d, h, mask in [(4, 8, 2, None), (16, 64, 4, "causal"), (128, 256, 8, None),
                          (512, 512, 8, "causal")]:
        print(f"{n:>5} {d:>7} {h:>5} {str(mask):>6}  {worst(n, d, h, mask):.2e}")
