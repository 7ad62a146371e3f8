"""Peer side of `scripts/bench image`: the transformers 5.17 Qwen2VL image processor (PIL decode +
its default torchvision backend) on one thread, on the same JPEG as s1's bench_image.

  image_bench.py make FILE            writes the seeded 1920x1080 test JPEG (Pillow, quality 90)
  image_bench.py peer FILE MAX_PIXELS N   prints median ms: decode, resize, normalize+patchify, total

The split times the processor's own steps: PIL open+convert("RGB") (decode), then the processor
with do_rescale/do_normalize off on a uint8 tensor (resize + patchify), then the full processor
call (resize + normalize + patchify); normalize+patchify = full - resize-only."""
import statistics
import sys
import time


def make(path):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(20261129)
    h, w = 1080, 1920
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([128 + 100 * np.sin(x / 97.0 + c) * np.cos(y / 61.0 - c) for c in range(3)], -1)
    img = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(img, "RGB").save(path, "JPEG", quality=90)


def peer(path, max_pixels, iters):
    import torch
    from PIL import Image
    from transformers import Qwen2VLImageProcessor

    torch.set_num_threads(1)
    proc = Qwen2VLImageProcessor(min_pixels=65536, max_pixels=max_pixels, patch_size=16,
                                 temporal_patch_size=2, merge_size=2,
                                 image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    grid = None
    print(f"peer: {type(proc).__name__} ({type(proc).__mro__[1].__name__}), torch {torch.__version__}")
    for clock, name in ((time.process_time, "process CPU time"), (time.perf_counter, "wall")):
        t_dec, t_full, t_noscale = [], [], []
        for i in range(iters + 2):
            t0 = clock()
            with Image.open(path) as im:
                rgb = im.convert("RGB")
            t1 = clock()
            out = proc(images=[rgb], return_tensors="pt")
            t2 = clock()
            proc(images=[rgb], return_tensors="pt", do_rescale=False, do_normalize=False)
            t3 = clock()
            if i >= 2:
                t_dec.append(t1 - t0)
                t_full.append(t2 - t1)
                t_noscale.append(t3 - t2)
        grid = out["image_grid_thw"].tolist()
        med = lambda v: 1e3 * statistics.median(v)
        print(f"{path} grid {grid}: decode {med(t_dec):.2f} ms, resize+patchify "
              f"{med(t_noscale):.2f} ms, normalize {max(med(t_full) - med(t_noscale), 0):.2f} ms, "
              f"processor {med(t_full):.2f} ms, total {med(t_dec) + med(t_full):.2f} ms "
              f"(median of {iters}, {name})")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        peer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
