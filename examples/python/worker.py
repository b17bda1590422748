"""A Redis Streams worker that plays well with pelwarden (Debian: python3-redis).

It heartbeats while it is not stuck in a job, dedupes jobs by lineage, and
on SIGTERM finishes the job in hand, then hands the rest back with
`pelwarden deregister`. Configuration comes from the environment: REDIS_URL,
STREAM, GROUP, HOSTNAME (the consumer name), and optionally HEARTBEAT_EVERY
and WORK_TIME (seconds), LEDGER (a hash of finished jobs), and for the CLI
PELWARDEN_SERVER, PELWARDEN_TOKEN_FILE (the workers' token) and
PELWARDEN_FLAGS.
"""
import os
import signal
import subprocess
import threading
import time

import redis

env = os.environ.get
r = redis.Redis.from_url(env("REDIS_URL", "redis://localhost:6379"), decode_responses=True)
stream, group, me = env("STREAM"), env("GROUP"), env("HOSTNAME")
beat_key = "hb:" + me  # pelwarden's heartbeatKey: "hb:{consumer}"
every = float(env("HEARTBEAT_EVERY", "5"))
ledger = env("LEDGER", "jobs:done")
stopping = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopping.set())
busy_since = None  # when the job in hand started


def heartbeat(done):
    # The time in milliseconds, unless a job has run far longer than any
    # should: then the worker is stuck, and pelwarden should see it stop.
    while not done.is_set():
        if busy_since is None or time.monotonic() - busy_since < 600:
            r.set(beat_key, int(time.time() * 1000), px=int(every * 10_000))  # expiry: cleanup after a crash
        done.wait(every)


def job_key(entry_id, fields):
    # Every delivery of one job names the same original, however often
    # pelwarden requeued it.
    origin = (fields.get("pelwarden-original-stream"), fields.get("pelwarden-original-id"))
    return "/".join(origin) if all(origin) else f"{stream}/{entry_id}"


def process(entry_id, fields):
    global busy_since
    key = job_key(entry_id, fields)
    with r.pipeline(transaction=True) as tx:  # the ledger and the XACK together
        if not r.hexists(ledger, key):  # else done by a worker judged dead that finished after all
            busy_since = time.monotonic()
            time.sleep(float(env("WORK_TIME", "0.1")))  # the job itself
            busy_since = None
            tx.hincrby(ledger, key, 1)
        tx.xack(stream, group, entry_id).execute()


try:
    r.xgroup_create(stream, group, id="0", mkstream=True)
except redis.ResponseError as e:
    if "BUSYGROUP" not in str(e):
        raise
beats = threading.Event()
threading.Thread(target=heartbeat, args=(beats,), daemon=True).start()
start = "0"  # first what this name already holds (a restart), then new entries
while not stopping.is_set():
    got = r.xreadgroup(group, me, {stream: start}, count=5, block=1000)
    entries = got[0][1] if got else []
    if start == "0" and not entries:
        start = ">"
    for entry_id, fields in entries:
        if stopping.is_set():
            break  # read but not started: deregister gives it back
        process(entry_id, fields or {})  # a deleted entry has no fields

if env("PELWARDEN_SERVER"):
    # Requeue what this consumer still holds, then delete it. PELWARDEN_FLAGS
    # adds --tls-ca, --tls-cert and --tls-key where pelwarden asks for them.
    subprocess.run(["pelwarden", "deregister", *env("PELWARDEN_FLAGS", "").split(),
                    "--stream", stream, "--group", group, "--consumer", me], check=True, timeout=30)
beats.set()
r.delete(beat_key)
