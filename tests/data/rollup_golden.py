#!/usr/bin/env python3
"""rollup_golden.py - writes tests/data/rollup_cases.txt: rollup input rows
(as ingest/batch.c writes them: link id or NULL, code, client id, visit time,
is_bot, the ten link_day_dim values) and, computed here independently of
ingest/rollup.c by plain Python grouping, the expected link_day_dim_batch
elements, link_hour rows (distinct human clients) and orphan_day rows. Run
at authoring time only: python3 tests/data/rollup_golden.py > tests/data/rollup_cases.txt"""
import random
from collections import defaultdict

DIMS = ["country", "province", "city", "isp", "browser", "browser_version", "os",
        "device_type", "referer_host", "language"]
A, B, C = "a" * 40, "0123456789abcdef0123456789abcdef01234567", "f" * 40
GB = ["GB", "GB/England", "GB/England/London", "ISP 1", "Chrome", "Chrome 120", "Windows",
      "desktop", "www.google.com", "en-gb"]
US = ["US", "US/California", "US/California/Mountain View", "Google", "Mobile Safari",
      "Mobile Safari 17", "iOS", "mobile", "", "en-us"]
BOT = ["US", "", "", "", "Googlebot", "Googlebot 2", "Other", "other", "", ""]
ODD = ['a,b', 'q"uote', 'back\\slash', '{brace}', 'tab\there', 'NULL', '', 'x y', '\\N',
       'new\nline']


def esc(s):
    out = []
    for ch in s:
        out.append({"\t": "\\t", "\n": "\\n", "\\": "\\\\"}.get(ch, ch))
    return "".join(out)


def ts(day, hms):
    return f"2024-05-{day:02d} {hms}.000000+00"


CASES = [
    ("human and bot in one hour", [
        (7, "abc", A, ts(1, "10:15:00"), False, GB),
        (7, "abc", B, ts(1, "10:45:00"), True, BOT),
    ], None),
    ("counts, distinct clients, hours, days, links", [
        (7, "abc", A, ts(1, "10:05:00"), False, GB),
        (7, "abc", A, ts(1, "10:20:00"), False, GB),
        (7, "abc", B, ts(1, "10:59:59"), False, US),
        (7, "abc", C, ts(1, "11:00:00"), False, US),
        (7, "abc", A, ts(2, "00:30:00"), False, GB),
        (8, "xyz", A, ts(1, "10:10:00"), False, GB),
        (8, "xyz", C, ts(1, "10:11:00"), True, BOT),
        (8, "xyz", C, ts(1, "10:12:00"), True, BOT),
    ], None),
    ("orphans per code and day", [
        (None, "gone1", A, ts(1, "09:00:00"), False, GB),
        (None, "gone1", B, ts(1, "23:59:59"), True, BOT),
        (None, "gone1", A, ts(2, "00:00:00"), False, GB),
        (None, "gone2", C, ts(1, "12:00:00"), False, US),
        (7, "abc", A, ts(1, "12:00:00"), False, GB),
    ], None),
    ("values needing array and COPY escapes", [
        (9, "odd", A, ts(3, "08:00:00"), False, ODD),
        (9, "odd", B, ts(3, "08:30:00"), False, ODD),
        (9, "odd", C, ts(3, "09:30:00"), False, GB),
    ], None),
    ("keep mask", [
        (7, "abc", A, ts(1, "10:00:00"), False, GB),
        (7, "abc", B, ts(1, "10:30:00"), False, US),
        (None, "gone1", C, ts(1, "11:00:00"), False, US),
        (7, "abc", C, ts(1, "11:30:00"), True, BOT),
    ], "1010"),
]




def interleaved(n=120, seed=15):
    """Rows of three links (one with a 19-digit id, one negative), orphans and
    bots in random order over two days and several hours, so that rows of
    one link-day or link-hour are never next to each other in the batch."""
    rng = random.Random(seed)
    links = [7, 9223372036854775807, -5]
    clients = [A, B, C, "1" * 40, "2" * 40]
    rows = []
    for _ in range(n):
        day, hour = rng.choice([1, 2]), rng.choice([0, 9, 23])
        t = ts(day, f"{hour:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}")
        bot = rng.random() < 0.2
        if rng.random() < 0.1:
            rows.append((None, rng.choice(["gone1", "gone2"]), rng.choice(clients), t, bot, US))
            continue
        vals = BOT if bot else rng.choice([GB, US, ODD])
        rows.append((rng.choice(links), "k", rng.choice(clients), t, bot, vals))
    return rows


CASES.append(("interleaved links, days and hours", interleaved(), None))
CASES.append(("orphan codes of 64 multibyte characters, with a tab", [
    (None, "\u4e2d" * 64, A, ts(1, "09:00:00"), False, GB),
    (None, "\u4e2d" * 64, B, ts(1, "10:00:00"), True, BOT),
    (None, "\u4e2d" * 63 + "x", A, ts(1, "09:00:00"), False, GB),
    (None, "tab\there", A, ts(2, "09:00:00"), False, GB),
], None))
CASES.append(("interleaved, keep mask", interleaved(60, seed=16),
              "".join(random.Random(17).choice("01") for _ in range(60))))


def expected(rows, keep):
    dims = defaultdict(int)
    hours = {}
    orphans = defaultdict(lambda: [0, 0])
    for i, (link, code, client, t, bot, vals) in enumerate(rows):
        if keep and keep[i] != "1":
            continue
        day = t[:10]
        if link is None:
            orphans[(code, day)][1 if bot else 0] += 1
            continue
        for d, v in zip(DIMS, vals):
            dims[(link, day, "t" if bot else "f", d, v)] += 1
        h = hours.setdefault((link, t[:13] + ":00:00+00"), [0, 0, t, t, set()])
        h[1 if bot else 0] += 1
        h[2], h[3] = min(h[2], t), max(h[3], t)
        if not bot:
            h[4].add(client)
    out = []
    for (link, day, bot, d, v), n in dims.items():
        out.append(f"dim\t{link}\t{day}\t{bot}\t{d}\t{esc(v)}\t{n}")
    for (link, hour), (n, nb, first, last, clients) in hours.items():
        out.append(f"hour\t{link}\t{hour}\t{n}\t{nb}\t{first}\t{last}\t{','.join(sorted(clients))}")
    for (code, day), (n, nb) in orphans.items():
        out.append(f"orphan\t{esc(code)}\t{day}\t{n}\t{nb}")
    return sorted(out)


print("# Generated by tests/data/rollup_golden.py (expected tuples computed in Python,")
print("# independently of ingest/rollup.c); read by tests/unit/test_rollup.c.")
print("# roll: link (\\N = orphan), code, client, visit_time, is_bot, the ten values")
print("#   (escapes \\t \\n \\\\; a field that is exactly \\N stands for NULL: only the link)")
print("# dim: link, day, is_bot, dimension, value, visits  (link_day_dim_batch elements)")
print("# hour: link, hour, visits, bot_visits, first, last, human clients sorted")
print("# orphan: code, day, visits, bot_visits")
for name, rows, keep in CASES:
    print(f"\ncase\t{name}")
    for link, code, client, t, bot, vals in rows:
        fields = ["\\N" if link is None else str(link), esc(code), client, t, "t" if bot else "f"]
        print("roll\t" + "\t".join(fields + [esc(v) for v in vals]))
    if keep:
        print(f"keep\t{keep}")
    for line in expected(rows, keep):
        print(line)
    print("end")
