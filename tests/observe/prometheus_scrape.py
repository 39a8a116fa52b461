#!/usr/bin/env python3
"""Scrapes troupe_serve_metrics' endpoint and parses the text with
prometheus_client's own parser: every family typed, every value as the
endpoint's JSON says, the known work counted, histograms well formed.

usage: prometheus_scrape.py PATH_TO_troupe_serve_metrics
"""
import json
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

server = subprocess.Popen([sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
failures = []
try:
    url = server.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), f"unexpected first line {url!r}"
    with urllib.request.urlopen(url + "/metrics", timeout=20) as r:
        assert r.status == 200
        ctype = r.headers["Content-Type"]
        assert ctype == "text/plain; version=0.0.4; charset=utf-8", ctype
        text = r.read().decode()
    with urllib.request.urlopen(url + "/metrics.json", timeout=20) as r:
        doc = json.load(r)

    families = {f.name: f for f in text_string_to_metric_families(text)}
    # prometheus_client drops a counter's _total from the family name.
    # A histogram's samples are named _bucket, _sum and _count.
    def family(name):
        for suffix in ("_total", "_bucket", "_sum", "_count", ""):
            if name.endswith(suffix) and suffix:
                f = families.get(name[: -len(suffix)])
                if f is not None:
                    return f
        return families.get(name)

    def value(name, **labels):
        f = family(name)
        if f is None:
            failures.append(f"no family {name}")
            return None
        for s in f.samples:
            if s.name == name and s.labels == labels:
                return s.value
        failures.append(f"no sample {name}{labels}")
        return None

    def expect(name, want, **labels):
        got = value(name, **labels)
        if got != want:
            failures.append(f"{name}{labels}: {got}, expected {want}")

    actor = "{anonymous}::counter_actor"
    expect("troupe_actors_spawned_total", 3, type=actor)
    expect("troupe_actors_stopped_total", 1, type=actor)
    expect("troupe_actors_live", 2)
    expect("troupe_actor_restarts_total", 1, type=actor)
    expect("troupe_dead_letters_total", 1)
    expect("troupe_messages_processed_total", 1002)
    expect("troupe_worker_threads", 2)
    expect("troupe_mailbox_depth_sum", 0)

    h = family("app_wait_seconds")
    if h is None or h.type != "histogram":
        failures.append(f"app_wait_seconds: {h}")
    else:
        buckets = {float(s.labels["le"]): s.value for s in h.samples if s.name == "app_wait_seconds_bucket"}
        if buckets != {0.01: 1, 0.1: 2, 1.0: 3, float("inf"): 4}:
            failures.append(f"buckets {buckets}")
        expect("app_wait_seconds_count", 4, stage='pick "fast"')
        expect("app_wait_seconds_sum", 5.555, stage='pick "fast"')

    # Every family of the JSON is in the text with its type, and every
    # counter's and gauge's value agrees (the work was done before either
    # scrape; only the workers' busy time may have grown between them).
    for f in doc["families"]:
        tf = family(f["name"])
        if tf is None or tf.type != f["type"]:
            failures.append(f"{f['name']}: text {tf and tf.type}, json {f['type']}")
            continue
        if f["type"] == "histogram" or f["name"] == "troupe_worker_busy_seconds_total":
            continue
        for s in f["samples"]:
            got = value(f["name"], **s["labels"])
            if got != s["value"]:
                failures.append(f"{f['name']}{s['labels']}: text {got}, json {s['value']}")
    print(f"{len(families)} families parsed")
finally:
    server.stdin.close()
    tail = server.stdout.read()
    server.wait(timeout=20)
if server.returncode != 0:
    failures.append(f"server exited with {server.returncode}")
if "requests 2" not in tail:
    failures.append(f"server said {tail!r}")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
