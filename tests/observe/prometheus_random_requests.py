#!/usr/bin/env python3
"""Sends troupe_serve_metrics' endpoint 400 connections of random requests
(pieces of HTTP, bytes, bodies, early half-closes, byte-at-a-time writes),
then checks that it still answers GET /metrics and exits cleanly (under the
sanitizers, cleanly means without a report). Seeded: the seed is printed;
pass one to replay it.

usage: prometheus_random_requests.py PATH_TO_troupe_serve_metrics [SEED]
"""
import random
import socket
import subprocess
import sys

seed = int(sys.argv[2]) if len(sys.argv) > 2 else random.randrange(1 << 30)
print("seed", seed, flush=True)
rng = random.Random(seed)
srv = subprocess.Popen([sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
url = srv.stdout.readline().strip()
port = int(url.rsplit(":", 1)[1])
pieces = [b"GET ", b"HEAD ", b"POST ", b"/metrics", b"/metrics.json", b" HTTP/1.1\r\n", b" HTTP/1.0\r\n",
          b"Host: x\r\n", b"Connection: close\r\n", b"Connection: keep-alive\r\n", b"Content-Length: 3\r\n",
          b"Transfer-Encoding: chunked\r\n", b"\r\n", b"\r\n\r\n", b"\x00\xff", b"%", b"?a=b", b"\n", b"abc"]
for i in range(400):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(0.3)
    data = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 20)))
    if rng.random() < 0.2:
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
    try:
        if rng.random() < 0.5:
            s.sendall(data)
        else:
            for k in range(0, len(data), 7):
                s.sendall(data[k:k + 7])
        if rng.random() < 0.3:
            s.shutdown(socket.SHUT_WR)
        try:
            while s.recv(65536):
                pass
        except socket.timeout:
            pass
    except OSError:
        pass
    s.close()
# still serving?
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
reply = b""
while True:
    b = s.recv(65536)
    if not b: break
    reply += b
srv.stdin.close()
out = srv.stdout.read()
srv.wait(timeout=30)
ok = reply.startswith(b"HTTP/1.1 200 OK") and srv.returncode == 0
print("seed", seed, "ok" if ok else "FAIL", "exit", srv.returncode, out.strip())
sys.exit(0 if ok else 1)
