#!/usr/bin/env python3
"""Oracle fixtures for the image preparation (issue 4), run on the GPU machine.

Creates the source images deterministically (numpy + Pillow), runs transformers 5.17's default
Qwen2VLImageProcessor on them (what the references call after PIL `open().convert("RGB")`), and
writes expected grids, SHA-256 of the resized uint8 RGB and of `pixel_values`, sampled values and
stats; also a resampler sweep straight through torch's uint8 antialiased bicubic, on every CPU
capability torch offers, and 3-axis positions from the model's `get_rope_index`.

Usage: image_fixtures.py OUT_DIR          on the GPU machine: everything, into OUT_DIR/expected.json
       image_fixtures.py --decode-only OUT   decode-only fixtures (hand-written PNG variants Pillow
                                             cannot save: 16-bit RGB/RGBA/LA, grey+tRNS, 2/4-bit)
                                             into OUT/decode_expected.json; needs only the pinned
                                             Pillow 12.3 + numpy, so it also runs off the GPU machine.
Synthetic pixels come from `synth()`, whose C twin is `synth()` in tests/image/image_test.h: keep
the two identical.
"""
import hashlib
import inspect
import io
import json
import os
import platform
import subprocess
import sys
import traceback

import numpy as np

MIN_PX = 65536
BUDGETS = (401408, 602112)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def synth(h, w, seed, kind):
    """uint8 [h, w, 3]. kind 0: noise; 1: sawtooth ramps + 5 bits of noise; 2: smooth + 2 bits."""
    y = np.arange(h, dtype=np.uint32).reshape(h, 1, 1)
    x = np.arange(w, dtype=np.uint32).reshape(1, w, 1)
    c = np.arange(3, dtype=np.uint32).reshape(1, 1, 3)
    n = ((y * np.uint32(w) + x) * np.uint32(3) + c + np.uint32((seed * 0x9E3779B9) & 0xFFFFFFFF))
    n = n * np.uint32(2654435761)
    n ^= n >> np.uint32(15)
    n = n * np.uint32(2246822519)
    n ^= n >> np.uint32(13)
    noise = (n >> np.uint32(24)).astype(np.uint32)
    if kind == 0:
        v = noise
    elif kind == 1:
        v = (x * np.uint32(7) + y * np.uint32(5) + c * np.uint32(85) + (noise & np.uint32(31)))
    else:
        v = ((x * np.uint32(255)) // np.uint32(max(w - 1, 1)) + (y * np.uint32(128)) // np.uint32(max(h - 1, 1))
             + c * np.uint32(60) + (noise & np.uint32(3)))
    return (v & np.uint32(255)).astype(np.uint8)


def stats(a):
    a = np.asarray(a, dtype=np.float64)
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean())}


def make_sources():
    """name -> encoded bytes, all created here with Pillow."""
    from PIL import Image
    src = {}

    def save(name, img, fmt, **kw):
        bio = io.BytesIO()
        img.save(bio, fmt, **kw)
        src[name] = bio.getvalue()

    rgb = Image.fromarray(synth(217, 333, 1, 2))
    save("rgb_333x217.png", rgb, "PNG")
    a = synth(200, 300, 2, 2)
    alpha = synth(200, 300, 3, 0)[:, :, 0].copy()
    alpha[:50, :] = 0          # fully transparent band, colour still there underneath
    alpha[50:100, :] = 255
    save("rgba_300x200.png", Image.fromarray(np.dstack([a, alpha]), "RGBA"), "PNG")
    save("la_120x90.png", Image.fromarray(np.dstack([synth(90, 120, 4, 2)[:, :, 0],
                                                     synth(90, 120, 5, 0)[:, :, 1]]), "LA"), "PNG")
    save("gray_200x150.png", Image.fromarray(synth(150, 200, 6, 2)[:, :, 1], "L"), "PNG")
    pal = Image.fromarray(synth(120, 180, 7, 1)).quantize(colors=200, method=Image.Quantize.MEDIANCUT)
    save("palette_180x120.png", pal, "PNG", transparency=5)
    g16 = (synth(100, 160, 8, 0)[:, :, 0].astype(np.uint16) * 257)
    g16[:30, :] //= 300        # a band of values 0..218: kept as is by Pillow's clip
    save("gray16_160x100.png", Image.fromarray(g16, "I;16"), "PNG")
    bw = Image.fromarray(synth(64, 96, 9, 0)[:, :, 0] > 127)
    save("bilevel_96x64.png", bw, "PNG")
    save("rgb_320x256.png", Image.fromarray(synth(256, 320, 10, 2)), "PNG")
    save("baseline_333x217.jpg", rgb, "JPEG", quality=90)
    save("progressive_640x480.jpg", Image.fromarray(synth(480, 640, 11, 2)), "JPEG", quality=85,
         progressive=True)
    save("gray_200x150.jpg", Image.fromarray(synth(150, 200, 12, 2)[:, :, 2], "L"), "JPEG", quality=90)
    cmyk = Image.fromarray(np.dstack([synth(150, 200, 13, 2), synth(150, 200, 14, 2)[:, :, :1]]), "CMYK")
    save("cmyk_200x150.jpg", cmyk, "JPEG", quality=90)
    ex = Image.Exif()
    ex[0x0112] = 6
    save("exif6_160x120.jpg", Image.fromarray(synth(120, 160, 15, 2)), "JPEG", quality=90, exif=ex)
    save("lossy_300x200.webp", Image.fromarray(synth(200, 300, 16, 2)), "WEBP", quality=80)
    wa = np.dstack([synth(120, 150, 17, 2), synth(120, 150, 18, 0)[:, :, :1]])
    save("lossless_rgba_150x120.webp", Image.fromarray(wa, "RGBA"), "WEBP", lossless=True, exact=True)
    return src


def png_chunk(kind, data):
    import struct
    import zlib
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_raw(w, h, depth, ctype, rows, plte=None, trns=None):
    """A PNG written by hand: rows are packed bytes per row (filter 0 added here)."""
    import struct
    import zlib
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))
    if plte is not None:
        out += png_chunk(b"PLTE", plte)
    if trns is not None:
        out += png_chunk(b"tRNS", trns)
    out += png_chunk(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows), 9))
    return out + png_chunk(b"IEND", b"")


def make_png_variants():
    """name -> bytes: PNG layouts Pillow reads but cannot write."""
    w, h = 90, 70
    src = {}
    n16 = synth(h, w, 70, 0).astype(np.uint16) * 257 ^ synth(h, w, 71, 0).astype(np.uint16)
    be = n16.astype(">u2")
    src["rgb16_90x70.png"] = png_raw(w, h, 16, 2, [be[y].tobytes() for y in range(h)])
    rgba = np.dstack([be, be[:, :, :1] ^ np.uint16(0x5A5A)]).astype(">u2")
    src["rgba16_90x70.png"] = png_raw(w, h, 16, 6, [rgba[y].tobytes() for y in range(h)])
    la = be[:, :, :2].copy()
    src["la16_90x70.png"] = png_raw(w, h, 16, 4, [la[y].tobytes() for y in range(h)])
    g = (be[:, :, 0] // 200).astype(">u2")  # values 0..327: some above 255
    src["gray16_trns_90x70.png"] = png_raw(w, h, 16, 0, [g[y].tobytes() for y in range(h)], trns=b"\x00\x07")
    for depth in (2, 4):
        v = synth(h, w, 72 + depth, 0)[:, :, 0] >> (8 - depth)
        rows = []
        for y in range(h):
            bits = "".join(format(int(x), f"0{depth}b") for x in v[y])
            bits += "0" * (-len(bits) % 8)
            rows.append(int(bits, 2).to_bytes(len(bits) // 8, "big"))
        src[f"gray{depth}_90x70.png"] = png_raw(w, h, depth, 0, rows)
        if depth == 4:
            plte = synth(1, 16, 77, 0).tobytes()
            src["pal4_trns_90x70.png"] = png_raw(w, h, 4, 3, rows, plte=plte, trns=bytes(range(0, 160, 20)))
    rgb8 = synth(h, w, 78, 1)
    src["rgb_trns_90x70.png"] = png_raw(w, h, 8, 2, [rgb8[y].tobytes() for y in range(h)], trns=b"\x00\x10\x00\x20\x00\x30")
    g8 = synth(h, w, 79, 2)[:, :, 0]
    src["gray_trns_90x70.png"] = png_raw(w, h, 8, 0, [g8[y].tobytes() for y in range(h)], trns=b"\x00\x40")
    return src


def make_encoded_variants():
    """name -> bytes: JPEG and WebP encodings beyond the processor cases (Pillow saves them)."""
    from PIL import Image
    src = {}

    def save(name, img, fmt, **kw):
        bio = io.BytesIO()
        img.save(bio, fmt, **kw)
        src[name] = bio.getvalue()

    a = Image.fromarray(synth(75, 101, 80, 1))
    save("q95_444_101x75.jpg", a, "JPEG", quality=95, subsampling=0)
    save("q75_422_101x75.jpg", a, "JPEG", quality=75, subsampling=1)
    save("q30_prog_opt_101x75.jpg", a, "JPEG", quality=30, progressive=True, optimize=True)
    save("restart_101x75.jpg", a, "JPEG", quality=80, restart_marker_blocks=2)
    save("gray_prog_101x75.jpg", a.convert("L"), "JPEG", quality=85, progressive=True)
    save("cmyk_prog_101x75.jpg", Image.fromarray(np.dstack([synth(75, 101, 81, 0), synth(75, 101, 82, 2)[:, :, :1]]),
                                                 "CMYK"), "JPEG", quality=85, progressive=True)
    # The same CMYK JPEG without its APP14 "Adobe" segment: Pillow still reads it inverted.
    b = src["cmyk_prog_101x75.jpg"]
    i = b.find(b"\xff\xee")
    assert i > 0 and b[i + 4:i + 9] == b"Adobe"
    src["cmyk_noadobe_101x75.jpg"] = b[:i] + b[i + 2 + int.from_bytes(b[i + 2:i + 4], "big"):]
    rgba = Image.fromarray(np.dstack([synth(75, 101, 83, 2), synth(75, 101, 84, 0)[:, :, :1]]), "RGBA")
    save("lossy_rgba_101x75.webp", rgba, "WEBP", quality=70)
    frames = [Image.fromarray(synth(60, 80, 85 + k, 2)) for k in range(3)]
    save("anim_80x60.webp", frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100, lossless=True)
    save("anim_80x60.png", frames[0], "PNG", save_all=True, append_images=frames[1:], duration=100)
    return src


def decode_only(out):
    from PIL import Image
    import PIL
    os.makedirs(os.path.join(out, "sources"), exist_ok=True)
    res = {"pillow": PIL.__version__, "cases": []}
    for name, data in list(make_png_variants().items()) + list(make_encoded_variants().items()):
        with open(os.path.join(out, "sources", name), "wb") as f:
            f.write(data)
        im = Image.open(io.BytesIO(data))
        dec = np.asarray(im.convert("RGB"))
        res["cases"].append({"source": name, "pil_mode": im.mode, "wh": list(im.size),
                             "decoded_rgb_sha256": sha(dec.tobytes()), "decoded_stats": stats(dec),
                             "source_sha256": sha(data)})
    with open(os.path.join(out, "decode_expected.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


# Synthetic processor inputs (no file): (name, h, w, seed, kind)
SYNTH_CASES = [
    ("synth_48x64", 48, 64, 21, 1),          # upscale (w x h = 64 x 48)
    ("synth_3000x4000", 3000, 4000, 22, 1),  # hard downscale
    ("synth_20x2000", 20, 2000, 23, 1),      # extreme aspect, tie in round(2000/32)
    ("synth_2000x20", 2000, 20, 24, 0),
    ("synth_1080x1920", 1080, 1920, 25, 2),
    ("synth_256x256", 256, 256, 26, 0),      # on the grid at both budgets
    ("synth_480x640", 480, 640, 27, 1),
    ("synth_217x333", 217, 333, 28, 0),
    ("synth_900x1600", 900, 1600, 29, 2),
    ("synth_100x160", 100, 160, 30, 1),
    ("synth_1000x1", 1, 200, 31, 0),         # aspect 200: allowed? side < factor?
    ("synth_10x2020", 10, 2020, 32, 0),      # aspect 202: must fail
]

# Resampler sweep: (in_h, in_w, out_h, out_w, seed, kind)
RESAMPLE_CASES = [
    (48, 64, 224, 320, 40, 0), (48, 64, 224, 320, 41, 2), (7, 5, 64, 96, 42, 0), (1, 1, 32, 32, 43, 0),
    (3000, 4000, 672, 896, 44, 0), (3000, 4000, 32, 32, 45, 0), (1080, 1920, 544, 960, 46, 1),
    (217, 333, 224, 320, 47, 0), (217, 333, 448, 672, 48, 1), (480, 640, 480, 320, 49, 0),
    (480, 640, 240, 640, 50, 0), (20, 2000, 64, 5120, 51, 0), (2000, 20, 4096, 32, 52, 1),
    (100, 160, 224, 352, 53, 0), (999, 777, 320, 256, 54, 0), (513, 511, 256, 768, 55, 0),
    (64, 64, 63, 65, 56, 0), (300, 200, 299, 201, 57, 0), (256, 256, 96, 96, 58, 0),
    (129, 1000, 128, 333, 59, 0), (45, 4096, 32, 64, 60, 0), (4096, 13, 100, 7, 61, 0),
    (640, 480, 1000, 700, 62, 2), (33, 31, 32, 32, 63, 0), (150, 200, 224, 288, 64, 2),
]


def resample_torch(a, oh, ow, channels_last):
    import torch
    t = torch.from_numpy(a).permute(2, 0, 1).unsqueeze(0)
    t = t.contiguous(memory_format=torch.channels_last) if channels_last else t.contiguous()
    o = torch.nn.functional.interpolate(t, size=[oh, ow], mode="bicubic", align_corners=False,
                                        antialias=True)
    return o[0].permute(1, 2, 0).contiguous().numpy()


def resample_child():
    """Runs in a subprocess under one ATEN_CPU_CAPABILITY; prints {key: sha}."""
    import torch
    res = {"capability": torch.backends.cpu.get_cpu_capability()}
    for (ih, iw, oh, ow, seed, kind) in RESAMPLE_CASES:
        a = synth(ih, iw, seed, kind)
        for cl in (False, True):
            o = resample_torch(a, oh, ow, cl)
            res[f"{ih}x{iw}->{oh}x{ow}/{seed}/{int(cl)}"] = sha(o.tobytes())
    print("RESULT " + json.dumps(res))


def unpatchify(pv, grid):
    """pixel_values [n, 1536] -> [H, W, 3] float32 (first temporal copy), checking the copies agree."""
    _, gh, gw = grid
    x = pv.reshape(gh // 2, gw // 2, 2, 2, 3, 2, 16, 16)  # bh bw ih iw c t py px
    assert np.array_equal(x[:, :, :, :, :, 0], x[:, :, :, :, :, 1])
    x = x[:, :, :, :, :, 0].transpose(0, 2, 5, 1, 3, 6, 4)  # bh ih py bw iw px c
    return x.reshape(gh * 16, gw * 16, 3)


def processor_case(proc, rgb_img, name, budget):
    import torch
    r = {"name": name, "max_pixels": budget}
    try:
        out = proc(images=[rgb_img], return_tensors="pt")
    except Exception as e:  # noqa: BLE001
        r["error"] = f"{type(e).__name__}: {e}"
        return r, None
    pv = out["pixel_values"]
    grid = [int(v) for v in out["image_grid_thw"][0].tolist()]
    pvn = pv.numpy().astype("<f4")
    img = unpatchify(pvn, grid)
    u8 = np.rint(img.astype(np.float64) * 127.5 + 127.5)
    assert u8.min() >= 0 and u8.max() <= 255
    u8 = u8.astype(np.uint8)
    recomputed = ((torch.from_numpy(u8).float() - 127.5) / 127.5).numpy()
    r.update({
        "grid_thw": grid, "resized_hw": [grid[1] * 16, grid[2] * 16], "n_patches": int(pv.shape[0]),
        "n_image_tokens": grid[0] * grid[1] * grid[2] // 4, "dtype": str(pv.dtype),
        "pixel_values_sha256": sha(pvn.tobytes()), "resized_rgb_sha256": sha(u8.tobytes()),
        "recompute_bit_exact": bool(np.array_equal(recomputed, img)),
        "pv_stats": stats(pvn), "rgb_stats": stats(u8),
        "pv_samples": [[int(i), int(k), float(pvn[i, k])] for i, k in
                       [(0, 0), (0, 1535), (pvn.shape[0] // 2, 777), (pvn.shape[0] - 1, 0),
                        (pvn.shape[0] - 1, 1535), (pvn.shape[0] // 3, 256)]],
    })
    return r, u8


def rope_cases(out):
    import torch
    import transformers
    res = {"ok": False}
    IMG, VS, VE = 248056, 248053, 248054

    def seq(parts):
        ids, grids = [], []
        for p in parts:
            if isinstance(p, int):
                ids += [1000 + (len(ids) * 7) % 5000 for _ in range(p)]
            else:
                t, h, w = p
                ids += [VS] + [IMG] * (t * h * w // 4) + [VE]
                grids.append([t, h, w])
        return ids, grids

    cases = {
        "worked_example": [5, (1, 16, 16), 3],
        "two_images": [12, (1, 14, 20), 4, (1, 2, 160), 9],
        "tall_then_wide": [1, (1, 64, 36), 0, (1, 36, 64), 2],
        "text_only": [17],
        "image_first": [0, (1, 4, 6)],
    }
    try:
        from transformers import Qwen3_5Config
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
        cfg = Qwen3_5Config()
        res["config_ids"] = {"image_token_id": cfg.image_token_id, "vision_start_token_id":
                             cfg.vision_start_token_id, "spatial_merge_size": cfg.vision_config.spatial_merge_size}
        model = None
        try:
            with torch.device("meta"):
                model = mq.Qwen3_5Model(cfg)
            res["how"] = "meta Qwen3_5Model"
        except Exception as e:  # noqa: BLE001
            res["meta_error"] = repr(e)
            model = mq.Qwen3_5Model.__new__(mq.Qwen3_5Model)
            torch.nn.Module.__init__(model)
            model.config = cfg
            res["how"] = "bare Qwen3_5Model"
        fn = model.get_rope_index
        res["signature"] = str(inspect.signature(fn))
        with open(os.path.join(out, "src_get_rope_index.py.txt"), "w") as f:
            f.write(inspect.getsource(type(model).get_rope_index))
        for name, parts in cases.items():
            ids, grids = seq(parts)
            input_ids = torch.tensor([ids], dtype=torch.long)
            mm = (input_ids == IMG).long()
            kw = {"input_ids": input_ids, "image_grid_thw": torch.tensor(grids, dtype=torch.long) if grids else None,
                  "video_grid_thw": None, "attention_mask": torch.ones_like(input_ids), "mm_token_type_ids": mm}
            params = inspect.signature(fn).parameters
            kw = {k: v for k, v in kw.items() if k in params}
            pos, delta = fn(**kw)
            res[name] = {"ids": ids, "grids": grids, "positions": pos[:, 0, :].tolist(),
                         "rope_delta": int(delta.reshape(-1)[0]) if delta is not None else None}
        res["ok"] = True
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc()
    return res


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--resample-child":
        resample_child()
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--decode-only":
        decode_only(sys.argv[2])
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for d in ("sources", "decoded", "resized"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    import PIL
    import torch
    import torchvision
    import transformers
    from PIL import Image, features
    info = {"python": sys.version, "platform": platform.platform(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "transformers": transformers.__version__,
            "pillow": PIL.__version__, "numpy": np.__version__,
            "libjpeg_turbo": features.version("jpg"), "libwebp": features.version("webp"),
            "zlib": features.version("zlib"), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}
    from transformers import Qwen2VLImageProcessor, AutoImageProcessor
    cfgdir = os.path.join(out, "_pp")
    os.makedirs(cfgdir, exist_ok=True)
    with open(os.path.join(cfgdir, "preprocessor_config.json"), "w") as f:
        json.dump({"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16,
                   "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                   "resample": 3, "rescale_factor": 1 / 255, "do_convert_rgb": True, "do_resize": True,
                   "do_rescale": True, "do_normalize": True, "processor_class": "Qwen3VLProcessor",
                   "image_processor_type": "Qwen2VLImageProcessorFast"}, f)
    try:
        auto = AutoImageProcessor.from_pretrained(cfgdir)
        info["auto_class"] = f"{type(auto).__module__}.{type(auto).__name__}"
        info["auto_mro"] = [c.__name__ for c in type(auto).__mro__][:6]
    except Exception as e:  # noqa: BLE001
        info["auto_error"] = repr(e)
        auto = None
    procs = {}
    for b in BUDGETS:
        if auto is not None:
            try:
                p = AutoImageProcessor.from_pretrained(cfgdir, size={"shortest_edge": MIN_PX, "longest_edge": b})
            except Exception as e:  # noqa: BLE001
                info[f"auto_size_error_{b}"] = repr(e)
                p = None
        if auto is None or p is None:
            p = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                      image_std=[0.5] * 3, size={"shortest_edge": MIN_PX, "longest_edge": b})
        procs[b] = p
        info[f"proc_{b}"] = {"class": type(p).__name__, "size": str(p.size),
                             "backend": str(getattr(p, "backend", None)), "device": str(getattr(p, "device", None))}
    info["Qwen2VLImageProcessor_mro"] = [c.__name__ for c in Qwen2VLImageProcessor.__mro__][:6]
    # Source dumps of the code paths, to read (never committed).
    for label, obj in [("processor_module", sys.modules[type(procs[BUDGETS[0]]).__module__])]:
        try:
            with open(os.path.join(out, f"src_{label}.py.txt"), "w") as f:
                f.write(inspect.getsource(obj))
        except Exception as e:  # noqa: BLE001
            info[f"src_{label}_error"] = repr(e)
    try:
        import torchvision.transforms.v2.functional._geometry as g
        with open(os.path.join(out, "src_tv_resize.py.txt"), "w") as f:
            f.write(inspect.getsource(g.resize_image))
            f.write(inspect.getsource(g._do_native_uint8_resize_on_cpu) if hasattr(g, "_do_native_uint8_resize_on_cpu") else "")
    except Exception as e:  # noqa: BLE001
        info["src_tv_error"] = repr(e)
    try:
        bm = sys.modules.get("transformers.image_processing_backends")
        if bm is not None:
            with open(os.path.join(out, "src_backends.py.txt"), "w") as f:
                f.write(inspect.getsource(bm))
    except Exception as e:  # noqa: BLE001
        info["src_backends_error"] = repr(e)

    # Tracing which resize ran: count calls into torch interpolate and PIL resize.
    calls = {"interpolate": [], "pil_resize": 0}
    orig_interp = torch.nn.functional.interpolate

    def traced(inp, *a, **k):
        calls["interpolate"].append({"dtype": str(inp.dtype), "device": str(inp.device), "shape": list(inp.shape),
                                     "mode": k.get("mode"), "antialias": k.get("antialias"),
                                     "channels_last": bool(inp.is_contiguous(memory_format=torch.channels_last))})
        return orig_interp(inp, *a, **k)
    torch.nn.functional.interpolate = traced
    import torchvision.transforms.v2.functional._geometry as geo
    geo_interp = getattr(geo, "interpolate", None)
    if geo_interp is not None:
        geo.interpolate = traced
    orig_pil = Image.Image.resize

    def traced_pil(self, *a, **k):
        calls["pil_resize"] += 1
        return orig_pil(self, *a, **k)
    Image.Image.resize = traced_pil

    cases = []
    srcs = make_sources()
    for name, data in srcs.items():
        with open(os.path.join(out, "sources", name), "wb") as f:
            f.write(data)
        im = Image.open(io.BytesIO(data))
        mode, fmt, size = im.mode, im.format, im.size
        rgb = im.convert("RGB")
        dec = np.asarray(rgb)
        with open(os.path.join(out, "decoded", name + ".rgb"), "wb") as f:
            f.write(dec.tobytes())
        for b in BUDGETS:
            r, u8 = processor_case(procs[b], rgb, name, b)
            r.update({"source": name, "pil_mode": mode, "pil_format": fmt, "wh": list(size),
                      "decoded_rgb_sha256": sha(dec.tobytes()), "decoded_stats": stats(dec),
                      "source_sha256": sha(data), "source_bytes": len(data)})
            if u8 is not None:
                with open(os.path.join(out, "resized", f"{name}.{b}.rgb"), "wb") as f:
                    f.write(u8.tobytes())
            cases.append(r)
    ncalls0 = len(calls["interpolate"])
    for (name, h, w, seed, kind) in SYNTH_CASES:
        a = synth(h, w, seed, kind)
        for b in BUDGETS:
            r, u8 = processor_case(procs[b], Image.fromarray(a), name, b)
            r.update({"synth": [h, w, seed, kind], "wh": [w, h], "decoded_rgb_sha256": sha(a.tobytes())})
            if u8 is not None and u8.size < 1_300_000:
                with open(os.path.join(out, "resized", f"{name}.{b}.rgb"), "wb") as f:
                    f.write(u8.tobytes())
            cases.append(r)
    info["interpolate_calls_sample"] = calls["interpolate"][:3] + calls["interpolate"][ncalls0:ncalls0 + 3]
    info["interpolate_calls"] = len(calls["interpolate"])
    info["pil_resize_calls"] = calls["pil_resize"]
    torch.nn.functional.interpolate = orig_interp
    if geo_interp is not None:
        geo.interpolate = geo_interp
    Image.Image.resize = orig_pil

    # Multi-image call: rows concatenated in input order.
    try:
        a1, a2 = synth(48, 64, 21, 1), synth(20, 2000, 23, 1)
        o = procs[602112](images=[Image.fromarray(a1), Image.fromarray(a2), Image.fromarray(a1)], return_tensors="pt")
        pv = o["pixel_values"].numpy().astype("<f4")
        info["multi_image"] = {"grids": o["image_grid_thw"].tolist(), "pixel_values_sha256": sha(pv.tobytes()),
                               "n_patches": int(pv.shape[0])}
    except Exception as e:  # noqa: BLE001
        info["multi_image_error"] = repr(e)

    # torchvision resize (what the processor calls) against plain interpolate, one case.
    try:
        import torchvision.transforms.v2.functional as TF
        a = synth(217, 333, 47, 0)
        t = torch.from_numpy(a).permute(2, 0, 1)
        tv = TF.resize(t, [224, 320], interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
        info["tv_equals_interpolate"] = bool(np.array_equal(tv.permute(1, 2, 0).numpy(),
                                                            resample_torch(a, 224, 320, False)))
    except Exception as e:  # noqa: BLE001
        info["tv_check_error"] = repr(e)

    # Resampler sweep on every capability.
    sweep = {}
    for cap in ("default", "avx2", "avx512", None):
        env = dict(os.environ)
        if cap:
            env["ATEN_CPU_CAPABILITY"] = cap
        p = subprocess.run([sys.executable, __file__, "--resample-child"], env=env, capture_output=True, text=True,
                           timeout=100)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        sweep[cap or "native"] = json.loads(line[0][7:]) if line else {"error": p.stderr[-2000:]}
    keys = [k for k in sweep["native"] if k != "capability"]
    agree = {cap: all(sweep[cap].get(k) == sweep["native"].get(k) for k in keys) for cap in sweep}
    info["resample_capabilities_agree_with_native"] = agree
    info["resample_channels_last_agree"] = all(
        sweep["native"][k] == sweep["native"][k[:-1] + "1"] for k in keys if k.endswith("/0"))
    resample = [{"in_hw": [ih, iw], "out_hw": [oh, ow], "seed": s, "kind": kd,
                 "sha256": sweep["native"][f"{ih}x{iw}->{oh}x{ow}/{s}/0"]}
                for (ih, iw, oh, ow, s, kd) in RESAMPLE_CASES]
    for (ih, iw, oh, ow, s, kd) in RESAMPLE_CASES:
        if oh * ow <= 250_000:
            o = resample_torch(synth(ih, iw, s, kd), oh, ow, False)
            with open(os.path.join(out, "resized", f"resample_{ih}x{iw}_{oh}x{ow}_{s}.rgb"), "wb") as f:
                f.write(o.tobytes())

    rope = rope_cases(out)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"info": info, "cases": cases, "resample": resample, "resample_sweep": sweep, "rope": rope},
                  f, indent=1)
    print(json.dumps(info, indent=1))
    print("cases", len(cases), "errors", [(c["name"], c["max_pixels"], c["error"]) for c in cases if "error" in c])
    print("rope ok", rope.get("ok"), rope.get("error", "")[-1500:])


if __name__ == "__main__":
    main()
