"""Oracle for OmniJev's multi-image panel (spec/omnijev.md §2.3, §10.5): Pillow 12.3 composes the
panel exactly as the spec describes `panels.compose` (convert("RGB"); `thumbnail((448, 448))` when
the longer side exceeds 448; the grid rule; cells cw x ch; border 6; label band 22; canvas
(32, 32, 32); the numeral k+1 in white at (x+2, y+4) with Pillow's default font; the image pasted
centred below the band; JPEG quality 88, read back).

Writes, per case, into OUT/<case>/: the input stills (in_K.png / in_K.jpg), canvas.png (the panel
before JPEG; its RGB bytes' SHA-256 as canvas_sha256), panel.jpg (the bytes Pillow's save wrote;
kept for three cases, the SHA-256 for all), and OUT/panels.json with the geometry:
stills' sizes after thumbnail, grid, cell size, canvas size, each cell's origin, each numeral's
textbbox and ink box, and the processor grid and image tokens of the panel (smart_resize, §10.3,
max_pixels 602,112).

Run with Pillow 12.3 (pinned in tests/oracle/requirements-ci.txt, so in .venv):
    .venv/bin/python tests/oracle/omnijev_panels.py tests/fixtures/omnijev/panels
"""
import hashlib
import io
import json
import math
import os
import sys

import numpy as np
import PIL
from PIL import Image, ImageDraw

BORDER, BAND, MAX_SIDE, QUALITY = 6, 22, 448, 88
KEEP_JPEG = ("two_32", "three_mixed", "five_thumbs")  # panel.jpg kept; the others by SHA-256
MIN_PIXELS, MAX_PIXELS, FACTOR = 65536, 602112, 32


def grid_of(n):
    if n == 1:
        return 1, 1
    if n == 2:
        return 2, 1
    if n <= 4:
        return 2, 2
    return 3, (n + 2) // 3


def compose(images):
    """spec §10.5, with Pillow; returns (canvas before JPEG, layout dict)."""
    ims = []
    for im in images:
        im = im.convert("RGB")
        if max(im.size) > MAX_SIDE:
            im.thumbnail((MAX_SIDE, MAX_SIDE))  # Pillow's defaults: BICUBIC, reducing_gap 2.0
        ims.append(im)
    cols, rows = grid_of(len(ims))
    cw, ch = max(i.width for i in ims), max(i.height for i in ims)
    W = cols * cw + (cols + 1) * BORDER
    H = rows * (ch + BAND) + (rows + 1) * BORDER
    canvas = Image.new("RGB", (W, H), (32, 32, 32))
    draw = ImageDraw.Draw(canvas)
    cells = []
    for k, im in enumerate(ims):
        r, c = divmod(k, cols)
        x = BORDER + c * (cw + BORDER)
        y = BORDER + r * (ch + BAND + BORDER)
        draw.text((x + 2, y + 4), str(k + 1), fill=(255, 255, 255))
        px, py = x + (cw - im.width) // 2, y + BAND + (ch - im.height) // 2
        canvas.paste(im, (px, py))
        cells.append({"x": x, "y": y, "paste": [px, py], "size": [im.width, im.height],
                      "textbbox": list(draw.textbbox((x + 2, y + 4), str(k + 1)))})
    return canvas, {"cols": cols, "rows": rows, "cw": cw, "ch": ch, "width": W, "height": H,
                    "cells": cells}


def smart_resize(h, w):
    hb, wb = FACTOR * round(h / FACTOR), FACTOR * round(w / FACTOR)
    if hb * wb > MAX_PIXELS:
        beta = math.sqrt(h * w / MAX_PIXELS)
        hb = max(FACTOR, FACTOR * math.floor(h / beta / FACTOR))
        wb = max(FACTOR, FACTOR * math.floor(w / beta / FACTOR))
    elif hb * wb < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (h * w))
        hb, wb = FACTOR * math.ceil(h * beta / FACTOR), FACTOR * math.ceil(w * beta / FACTOR)
    return [1, hb // 16, wb // 16], hb * wb // 1024


def pattern(w, h, seed):
    """Deterministic texture with edges (so resampling errors show) that PNG still compresses."""
    y, x = np.mgrid[0:h, 0:w]
    r = ((((x // 4) ^ (y // 4)) & 15) * 16 + seed * 8) & 255
    g = (((x // 7) + (y // 5)) * 40 + seed * 30) & 255
    b = (((x // 16 + y // 16 + seed) % 4) * 60 + (x * 255) // max(w - 1, 1) // 8) & 255
    return np.stack([r, g, b], -1).astype(np.uint8)


def solid(w, h, rgb):
    return np.broadcast_to(np.array(rgb, np.uint8), (h, w, 3)).copy()


def cases():
    """(name, [(filename, PIL image to save)])."""
    P = lambda w, h, s: Image.fromarray(pattern(w, h, s))  # noqa: E731
    rgba = np.dstack([pattern(300, 180, 4), (np.arange(300)[None, :].repeat(180, 0) % 256).astype(np.uint8)])
    return [
        ("two_32", [("in_0.png", Image.fromarray(solid(32, 32, (255, 0, 0)))),
                    ("in_1.png", Image.fromarray(solid(32, 32, (0, 0, 255))))]),
        ("three_mixed", [("in_0.png", P(120, 80, 0)), ("in_1.png", P(64, 200, 1)), ("in_2.png", P(301, 151, 2))]),
        ("four_odd", [("in_0.png", P(33, 17, 3)), ("in_1.png", P(448, 448, 4)), ("in_2.png", P(449, 100, 5)),
                      ("in_3.png", P(7, 3, 6))]),
        ("five_thumbs", [("in_0.png", P(1900, 1000, 7)), ("in_1.png", P(900, 700, 8)), ("in_2.png", P(3000, 200, 9)),
                         ("in_3.png", P(100, 100, 10)), ("in_4.png", P(470, 460, 11))]),
        ("portrait_jpeg", [("in_0.jpg", P(600, 1800, 12).resize((600, 1800), box=(0, 0, 150, 450))), ("in_1.jpg", P(1800, 1350, 13).resize((1800, 1350), box=(0, 0, 450, 337))),
                           ("in_2.png", Image.fromarray(rgba, "RGBA")),
                           ("in_3.png", P(250, 90, 14).convert("L"))]),
        ("twelve", [("in_%d.png" % k, P(40 + 13 * k, 90 - 5 * k, 15 + k)) for k in range(12)]),
        ("sixteen", [("in_%d.png" % k, P(20 + 9 * k, 150 - 7 * k, 30 + k)) for k in range(16)]),
    ]


def main():
    out = sys.argv[1]
    assert PIL.__version__ == "12.3.0", "the oracle is Pillow 12.3.0, found %s" % PIL.__version__
    meta = {"pillow": PIL.__version__, "quality": QUALITY, "cases": []}
    for name, files in cases():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        images = []
        for fn, im in files:
            p = os.path.join(d, fn)
            im.save(p, quality=75) if fn.endswith(".jpg") else im.save(p)
            images.append(Image.open(p))
        canvas, lay = compose(images)
        canvas.save(os.path.join(d, "canvas.png"))
        buf = io.BytesIO()
        canvas.save(buf, "JPEG", quality=QUALITY)
        if name in KEEP_JPEG:
            with open(os.path.join(d, "panel.jpg"), "wb") as f:
                f.write(buf.getvalue())
        back = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
        grid, tokens = smart_resize(back.shape[0], back.shape[1])
        lay.update({"name": name, "inputs": [fn for fn, _ in files],
                    "input_sizes": [list(Image.open(os.path.join(d, fn)).size) for fn, _ in files],
                    "grid": grid, "image_tokens": tokens,
                    "canvas_sha256": hashlib.sha256(canvas.tobytes()).hexdigest(),
                    "panel_sha256": hashlib.sha256(buf.getvalue()).hexdigest()})
        meta["cases"].append(lay)
        print(name, lay["width"], lay["height"], grid, tokens)
    with open(os.path.join(out, "panels.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
