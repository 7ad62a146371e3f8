"""Benchmark helper for `scripts/bench tokenizer`.

  tokenizer_bench.py corpus OUT.jsonl [MB]   writes a seeded ~1 MB mixed-script corpus, one JSON
                                              string (a paragraph) per line
  tokenizer_bench.py python TOKENIZER.json CORPUS.jsonl IDS_OUT [REPEATS]
                                              loads and encodes with the Python `tokenizers`
                                              library on one thread (set RAYON_NUM_THREADS=1 and
                                              TOKENIZERS_PARALLELISM=false), like bench_tok does
"""
import json
import random
import statistics
import sys
import time

SENTENCES = {
    "en": ["The quick brown fox jumps over the lazy dog.",
           "Prefill-only models read a state and answer questions with calibrated probabilities.",
           "It was the best of times, it was the worst of times, it was the age of wisdom.",
           "Please summarize the following report in three bullet points.",
           "Don't forget: the meeting moved to 3:30 PM on Thursday, room 204.",
           "In 2026, the team shipped version 1.4.2 with 37% lower latency."],
    "code": ["def area(r):\n    return 3.14159 * r ** 2\n",
             "for (size_t i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
             "SELECT name, COUNT(*) FROM orders GROUP BY name HAVING COUNT(*) > 10;\n",
             "const res = await fetch(`/api/v1/items?id=${id}`);\r\n"],
    "zh": ["人工智能正在改变我们的生活方式。", "请根据以下内容回答问题，并给出理由。",
           "今天天气很好，我们去公园散步吧。", "这个模型在多项基准测试中表现优异。"],
    "ja": ["こんにちは、世界。今日はいい天気ですね。", "東京の桜は三月の終わりに咲きます。",
           "この文章を英語に翻訳してください。"],
    "ko": ["안녕하세요, 만나서 반갑습니다.", "한국어 텍스트 토큰화 성능을 측정합니다.",
           "오늘 회의는 오후 세 시에 시작합니다."],
    "ar": ["مرحبا بالعالم، كيف حالك اليوم؟", "اللغة العربية جميلة وغنية بالمفردات."],
    "hi": ["नमस्ते दुनिया, आप कैसे हैं?", "हिन्दी भाषा में यह एक परीक्षण वाक्य है।"],
    "ru": ["Привет, мир! Это тестовое предложение.", "Модель отвечает на вопросы с вероятностями."],
    "emoji": ["Great job! 🎉👍🏽", "I ❤️ 🍕 and 👩‍👩‍👧", "Weather: ☀️ → 🌧️ → 🌈"],
}
WEIGHTS = {"en": 40, "code": 15, "zh": 12, "ja": 7, "ko": 6, "ar": 5, "hi": 5, "ru": 6, "emoji": 4}


def corpus(out, mb=1.0):
    rng = random.Random(20261129)
    target = int(mb * 1_000_000)
    size = 0
    langs = list(WEIGHTS)
    with open(out, "w", encoding="utf-8") as f:
        while size < target:
            parts = []
            for _ in range(rng.randint(3, 12)):
                s = rng.choice(SENTENCES[rng.choices(langs, [WEIGHTS[k] for k in langs])[0]])
                if rng.random() < 0.3:  # vary numbers and words so the cache is not everything
                    s = s.replace("3", str(rng.randint(0, 99999)), 1)
                    s += " " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                                       for _ in range(rng.randint(3, 12)))
                parts.append(s)
            para = (" " if rng.random() < 0.7 else "\n").join(parts) + rng.choice(["", "\n", "  "])
            size += len(para.encode())
            f.write(json.dumps(para, ensure_ascii=False) + "\n")


def python(path, corpus_path, ids_out, repeats=5):
    from tokenizers import Tokenizer
    loads, loads_cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        tk = Tokenizer.from_file(path)
        loads.append(time.perf_counter() - t0)
        loads_cpu.append(time.process_time() - c0)
    with open(corpus_path, encoding="utf-8") as f:
        lines = [json.loads(x) for x in f]
    total = sum(len(x.encode()) for x in lines)
    whole = "".join(lines)
    per_line, whole_t, per_line_cpu, whole_cpu = [], [], [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        n_tok = sum(len(tk.encode(x, add_special_tokens=False).ids) for x in lines)
        per_line.append(time.perf_counter() - t0)
        per_line_cpu.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        n_whole = len(tk.encode(whole, add_special_tokens=False).ids)
        whole_t.append(time.perf_counter() - t0)
        whole_cpu.append(time.process_time() - c0)
    with open(ids_out, "w") as f:
        for x in lines:
            f.write(json.dumps(tk.encode(x, add_special_tokens=False).ids, separators=(",", ":")) + "\n")
    print(json.dumps({
        "impl": "python tokenizers", "vocab": tk.get_vocab_size(True),
        "load_ms_min": round(min(loads) * 1e3, 1),
        "load_ms_median": round(statistics.median(loads) * 1e3, 1),
        "load_cpu_ms_min": round(min(loads_cpu) * 1e3, 1), "bytes": total,
        "lines": len(lines), "tokens": n_tok, "tokens_whole": n_whole,
        "lines_MBps_first": round(total / per_line[0] / 1e6, 2),
        "lines_MBps_median": round(total / statistics.median(per_line) / 1e6, 2),
        "lines_MBps_cpu_best": round(total / min(per_line_cpu) / 1e6, 2),
        "whole_MBps_median": round(total / statistics.median(whole_t) / 1e6, 2),
        "whole_MBps_cpu_best": round(total / min(whole_cpu) / 1e6, 2)}))


if __name__ == "__main__":
    if sys.argv[1] == "corpus":
        corpus(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1.0)
    else:
        python(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 5)
