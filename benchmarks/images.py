"""What the image budget does to typical images: their size, what is sent, and how long making it takes.

Not a test: run ``python benchmarks/images.py`` (needs matplotlib and numpy, from the test extra). For matplotlib
figures at the usual sizes and a photo-like image (noise, which PNG cannot compress) it prints the PNG's size, what
:func:`agentkernel.record.images.model_image` sends within :data:`~agentkernel.record.images.MAX_IMAGE_BYTES`, and
the time it took (best of 3; the budget check alone for images that fit, downscaling for the others).
"""

from __future__ import annotations

import base64
import io
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from agentkernel.record.images import MAX_IMAGE_BYTES, model_image  # noqa: E402


def figure_png(inches: tuple[float, float], dpi: int) -> bytes:
    figure = plt.figure(figsize=inches, dpi=dpi)
    plt.plot(np.random.default_rng(0).random(200))
    plt.title("a line plot")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def noise_png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


CASES = {
    "figure 6.4x4.8 in, 100 dpi (640x480)": lambda: figure_png((6.4, 4.8), 100),
    "figure 6.4x4.8 in, 200 dpi (retina, 1280x960)": lambda: figure_png((6.4, 4.8), 200),
    "figure 30x20 in, 100 dpi (3000x2000)": lambda: figure_png((30, 20), 100),
    "noise 1600x1200 (a photo, worst case)": lambda: noise_png(1600, 1200),
}


def main() -> None:
    print(f"budget: {MAX_IMAGE_BYTES:,} bytes per image")
    print(f"{'image':48} {'PNG bytes':>11} {'ms':>7}  sent")
    for name, make in CASES.items():
        raw = make()
        data = base64.b64encode(raw).decode("ascii")
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            image, note = model_image("image/png", data)
            best = min(best, time.perf_counter() - started)
        print(f"{name:48} {len(raw):>11,} {best * 1000:>7.1f}  {note}")


if __name__ == "__main__":
    main()
