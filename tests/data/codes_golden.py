#!/usr/bin/env python3
"""codes_golden.py - prints the golden "hash" and "seq" lines of
tests/data/codes_cases.txt and the "encode"/"decode" lines of
tests/data/base62_cases.txt, computed independently of redirector/codes.c with
Python's hashlib/hmac, plain integers and (seq only) the cryptography package's
AES. Run at authoring time only:
    python3 tests/data/codes_golden.py hash|seq|base62"""
import hashlib
import hmac
import sys

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def escape(b):
    """Bytes -> the data files' escaped text (\\t \\n \\\\ \\xHH)."""
    out = []
    for c in b:
        if c == 0x09:
            out.append("\\t")
        elif c == 0x0A:
            out.append("\\n")
        elif c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return "".join(out)


def candidates(url, length, salt):
    """The seed's buildShortCode(md5, length) with % 62, over MD5(url[#salt])."""
    data = url + (b"#%d" % salt if salt > 0 else b"")
    md5 = hashlib.md5(data).hexdigest()
    codes = []
    for i in range(4):
        sub16 = int(md5[i * 8:i * 8 + 8], 16)
        sb = ""
        for _ in range(length):
            sb += CHARS[sub16 % 62]
            sub16 >>= 32 // length
        codes.append(sb)
    return codes


URLS = [
    b"https://example.com/",
    b"https://m.sephora.cn/v2/html/rewardsBoutique/",
    b"http://www.example.org/a/very/long/path?utm_source=sms&utm_campaign=spring-sale&id=42",
    b"https://\xe4\xb8\xad\xe6\x96\x87.example/\xe8\xb7\xaf\xe5\xbe\x84",
    b"https://example.com/tab\there",
    b"",
    b"https://example.com/" + b"x" * 3000,
]


def hash_lines():
    for url in URLS:
        for length in range(1, 9):
            for salt in ((0, 1, 2) if length == 6 else (0,)):
                print("hash\t%d\t%d\t%s\t%s" % (length, salt, escape(url),
                                                "\t".join(candidates(url, length, salt))))
    for salt in (7, 123456, 2147483647):
        print("hash\t8\t%d\t%s\t%s" % (salt, escape(URLS[0]),
                                       "\t".join(candidates(URLS[0], 8, salt))))


def b62(v, width):
    s = ""
    for _ in range(width):
        s = CHARS[v % 62] + s
        v //= 62
    return s if v == 0 else None


def base62_lines():
    cases = [(0, 1), (0, 6), (1, 1), (61, 1), (62, 1), (62, 2), (3843, 2), (3844, 2),
             (3844, 3), (123456789, 6), (56800235583, 6), (56800235584, 6),
             (56800235584, 7), (218340105584895, 8), (218340105584896, 8),
             (218340105584896, 9), (2**63, 11), (2**64 - 1, 11), (2**64 - 1, 10),
             (839299365868340223, 10), (839299365868340224, 10), (0, 11)]
    for v, w in cases:
        s = b62(v, w)
        print("encode\t%d\t%d\t%s" % (v, w, s if s is not None else "ERR"))
    for v, w in cases:
        s = b62(v, w)
        if s is not None:
            print("decode\t%s\t%d" % (s, v))


def seq_key(secret):
    return hmac.new(secret, b"linkpulse codes_seq v1", hashlib.sha256).digest()


def seq_code(secret, counter, length):
    """8-round Feistel over 6*length bits, round function AES-256(key,
    "LPsq" round length 0 0 right-half-as-8-big-endian-bytes), cycle-walked
    into [0, 62^length)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    enc = Cipher(algorithms.AES(seq_key(secret)), modes.ECB()).encryptor()
    half = 3 * length
    mask = (1 << half) - 1

    def f(rnd, r):
        block = b"LPsq" + bytes([rnd, length, 0, 0]) + r.to_bytes(8, "big")
        return int.from_bytes(enc.update(block)[:8], "big") & mask

    x = counter
    while True:
        left, right = x >> half, x & mask
        for rnd in range(8):
            left, right = right, left ^ f(rnd, right)
        x = left << half | right
        if x < 62 ** length:
            return b62(x, length)


def seq_lines():
    for secret in (b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                   b"s"):
        for length in range(1, 9):
            for counter in sorted({0, 1, 2, 61, 1000, 62 ** length - 1}):
                if counter < 62 ** length:
                    print("seq\t%s\t%d\t%d\t%s" % (escape(secret), length, counter,
                                                   seq_code(secret, counter, length)))


if __name__ == "__main__":
    {"hash": hash_lines, "seq": seq_lines, "base62": base62_lines}[sys.argv[1]]()
