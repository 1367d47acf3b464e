#!/usr/bin/python3
"""A line-protocol peer around kazoo's lock recipes (Debian's python3-kazoo),
driven by latchkey's integration tests and benchmarks (tests/src/peers.rs).

Usage: /usr/bin/python3 kazoo_peer.py <connectString>

The protocol is CuratorPeer.java's: prints READY once connected, then
answers every stdin line with exactly one stdout line starting with "OK" or
"ERR <message>":

  mutex <path> acquire [timeout_ms]       OK acquired | OK timeout
  mutex <path> release                    OK released
  mutex <path> participants               OK <node,node,...>
  read|write <path> acquire [timeout_ms]  (kazoo ReadLock / WriteLock)
  read|write <path> release
  read|write <path> participants
  sem <path> <max> acquire [n] [timeout_ms]   OK acquired <n> | OK timeout
  sem <path> <max> release                OK released   (one lease)
  sem <path> <max> participants           OK <lease,lease,...>
  children <path>                         OK <child,child,...> (sorted by name)
  bench mutex <path> <cycles>             OK <cycles> <total_us> <p50_us> <p99_us>
  bench contended <path> <sessions> <seconds>
                                          OK <cycles> <elapsed_us> <handoff_p50_us> <handoff_p99_us>
  ping                                    OK pong
  quit                                    OK bye (then exits)

Differences from Curator, all kazoo's own: its locks are not reentrant (a
second acquire of a held lock answers ERR instead of blocking); lock nodes
are <path>/<uuid hex>__lock__<10 digits> (read locks __rlock__); a kazoo
Semaphore object holds at most one lease, so "acquire n" takes n of them,
and its lease nodes are <path>/<uuid hex> (no sequence), guarded by a
sibling lock at <path>-__lock__. Participants list a lock's own kind of node
in sequence order and a semaphore's leases in creation (czxid) order.

Environment: PEER_SESSION_MS (session timeout, default 10000),
PEER_CONNECT_MS (wait for the first connection, default 30000). The peer
exits when its parent process dies.
"""

import logging
import math
import os
import re
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NoNodeError

BENCH_CONNECT_S = 30.0
BENCH_ACQUIRE_S = 30.0
BENCH_JOIN_GRACE_S = 60.0


class Usage(Exception):
    """A bad command; answered as "ERR <message>"."""


def env_int(name, default):
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def new_client(hosts, session_ms):
    return KazooClient(hosts=hosts, timeout=session_ms / 1000.0)


def parse_int(text, what):
    try:
        value = int(text)
    except ValueError:
        raise Usage("bad %s: %s" % (what, text))
    if value < 0:
        raise Usage("%s must not be negative: %s" % (what, text))
    return value


def parse_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise Usage("bad seconds: " + text)
    if not 0 <= value <= 86400:
        raise Usage("seconds out of range: " + text)
    return value


def need(words, low, high):
    if not low <= len(words) <= high:
        raise Usage("wrong number of arguments for %s (see kazoo_peer.py)" % words[0])


def percentile(sorted_values, p):
    """Nearest-rank percentile of sorted values, 0 when empty."""
    if not sorted_values:
        return 0
    rank = math.ceil(p * len(sorted_values))
    return sorted_values[min(len(sorted_values) - 1, max(0, rank - 1))]


def as_list(names):
    return "OK " + ",".join(names)


def try_acquire(lock, timeout_s):
    """acquire with kazoo's two ways of saying "timed out" folded into False."""
    try:
        return bool(lock.acquire(timeout=timeout_s))
    except LockTimeout:
        return False


class Peer:
    def __init__(self, hosts, session_ms, client):
        self.hosts = hosts
        self.session_ms = session_ms
        self.client = client
        self.locks = {}  # (kind, path) -> kazoo lock
        self.sem_max = {}  # path -> max leases
        self.leases = {}  # path -> [Semaphore holding one lease]

    # ----- locks -------------------------------------------------------

    def lock(self, kind, path):
        key = (kind, path)
        if key not in self.locks:
            make = {
                "mutex": self.client.Lock,
                "read": self.client.ReadLock,
                "write": self.client.WriteLock,
            }[kind]
            self.locks[key] = make(path)
        return self.locks[key]

    def participants(self, lock):
        """The lock's own kind of contender node, in sequence order."""
        try:
            children = self.client.get_children(lock.path)
        except NoNodeError:
            return as_list([])
        pattern = re.compile(re.escape(lock._NODE_NAME) + r"(-?\d{10})$")
        found = []
        for child in children:
            match = pattern.search(child)
            if match:
                found.append((int(match.group(1)), child))
        return as_list(name for _, name in sorted(found))

    def lock_command(self, kind, words):
        lock = self.lock(kind, words[1])
        op = words[2]
        if op == "acquire":
            if lock.is_acquired:
                raise Usage("kazoo locks are not reentrant: %s %s is already held" % (kind, words[1]))
            if len(words) > 3:
                ms = parse_int(words[3], "timeout_ms")
                return "OK acquired" if try_acquire(lock, ms / 1000.0) else "OK timeout"
            lock.acquire()
            return "OK acquired"
        if len(words) != 3:
            raise Usage("%s takes no arguments" % op)
        if op == "release":
            if not lock.is_acquired:
                raise Usage("not held: %s %s" % (kind, words[1]))
            lock.release()
            return "OK released"
        if op == "participants":
            return self.participants(lock)
        raise Usage("unknown lock operation: " + op)

    # ----- semaphores --------------------------------------------------

    def sem_command(self, words):
        path = words[1]
        max_leases = parse_int(words[2], "maxLeases")
        if max_leases < 1:
            raise Usage("maxLeases must be at least 1")
        known = self.sem_max.get(path)
        if known is not None and known != max_leases:
            raise Usage("semaphore %s already used here with maxLeases %d" % (path, known))
        self.sem_max[path] = max_leases
        stack = self.leases.setdefault(path, [])
        op = words[3]
        if op == "acquire":
            n = parse_int(words[4], "n") if len(words) > 4 else 1
            if n < 1:
                raise Usage("n must be at least 1")
            deadline = None
            if len(words) > 5:
                deadline = time.monotonic() + parse_int(words[5], "timeout_ms") / 1000.0
            got = []
            try:
                for _ in range(n):
                    sem = self.client.Semaphore(path, max_leases=max_leases)
                    if deadline is None:
                        sem.acquire()
                    elif not try_acquire(sem, max(0.0, deadline - time.monotonic())):
                        for held in got:
                            held.release()
                        return "OK timeout"
                    got.append(sem)
            except BaseException:
                for held in got:
                    held.release()
                raise
            stack.extend(got)
            return "OK acquired %d" % len(got)
        if len(words) != 4:
            raise Usage("%s takes no arguments" % op)
        if op == "release":
            if not stack:
                raise Usage("no lease held on " + path)
            stack.pop().release()
            return "OK released"
        if op == "participants":
            try:
                children = self.client.get_children(path)
            except NoNodeError:
                return as_list([])
            found = []
            for child in children:
                try:
                    _, stat = self.client.get(path + "/" + child)
                except NoNodeError:
                    continue
                found.append((stat.czxid, child))
            return as_list(name for _, name in sorted(found))
        raise Usage("unknown sem operation: " + op)

    # ----- benchmarks --------------------------------------------------

    def bench_mutex(self, path, cycles):
        if cycles > 10000000:
            raise Usage("too many cycles: %d" % cycles)
        lock = self.client.Lock(path)
        micros = []
        start = time.perf_counter_ns()
        for _ in range(cycles):
            t0 = time.perf_counter_ns()
            if not try_acquire(lock, BENCH_ACQUIRE_S):
                raise Usage("bench mutex: not acquired within %d s (is %s held?)" % (BENCH_ACQUIRE_S, path))
            lock.release()
            micros.append((time.perf_counter_ns() - t0) // 1000)
        total = (time.perf_counter_ns() - start) // 1000
        micros.sort()
        return "OK %d %d %d %d" % (cycles, total, percentile(micros, 0.50), percentile(micros, 0.99))

    def bench_contended(self, path, sessions, seconds):
        """Same measurement as CuratorPeer.benchContended: each holder takes a
        generation number while holding the lock; handoff g is the time from
        holder g-1's release() returning to holder g's acquire() returning,
        clamped at 0."""
        if not 1 <= sessions <= 1000:
            raise Usage("sessions must be 1..1000: %d" % sessions)
        clients = []
        try:
            for _ in range(sessions):
                c = new_client(self.hosts, self.session_ms)
                clients.append(c)
                c.start(timeout=BENCH_CONNECT_S)
            generation = [0]
            gen_guard = threading.Lock()
            failure = []
            go = threading.Event()
            run_ns = int(seconds * 1e9)
            start_holder = [0]
            records = []
            threads = []

            def worker(client, mine):
                try:
                    lock = client.Lock(path)
                    go.wait()
                    end = start_holder[0] + run_ns
                    while not failure:
                        left = end - time.perf_counter_ns()
                        if left <= 0 or not try_acquire(lock, left / 1e9):
                            break
                        acquired = time.perf_counter_ns()
                        with gen_guard:
                            gen = generation[0]
                            generation[0] += 1
                        lock.release()
                        mine.append((gen, acquired, time.perf_counter_ns()))
                except BaseException as e:  # noqa: B902 - reported as ERR
                    failure.append(e)

            for i, c in enumerate(clients):
                mine = []
                records.append(mine)
                t = threading.Thread(target=worker, args=(c, mine), name="bench-contended-%d" % i, daemon=True)
                threads.append(t)
                t.start()
            start = time.perf_counter_ns()
            start_holder[0] = start
            go.set()
            join_deadline = time.monotonic() + seconds + BENCH_JOIN_GRACE_S
            for t in threads:
                t.join(max(0.0, join_deadline - time.monotonic()))
                if t.is_alive():
                    failure.append(RuntimeError(t.name + " still running after the grace time"))
            elapsed = (time.perf_counter_ns() - start) // 1000
            if failure:
                e = failure[0]
                raise Usage("bench contended: %s: %s" % (qualified(e), e))
            total = generation[0]
            acquired_at = [0] * total
            released_at = [0] * total
            for mine in records:
                for gen, acquired, released in mine:
                    acquired_at[gen] = acquired
                    released_at[gen] = released
            handoffs = sorted(
                max(0, acquired_at[g] - released_at[g - 1]) // 1000 for g in range(1, total)
            )
            return "OK %d %d %d %d" % (total, elapsed, percentile(handoffs, 0.50), percentile(handoffs, 0.99))
        finally:
            for c in clients:
                try:
                    c.stop()
                    c.close()
                except Exception:  # noqa: BLE001 - best effort
                    pass

    # ----- dispatch ----------------------------------------------------

    def dispatch(self, words):
        if not words:
            raise Usage("empty command")
        cmd = words[0]
        if cmd == "ping":
            need(words, 1, 1)
            return "OK pong"
        if cmd == "children":
            need(words, 2, 2)
            return as_list(sorted(self.client.get_children(words[1])))
        if cmd in ("mutex", "read", "write"):
            need(words, 3, 4)
            return self.lock_command(cmd, words)
        if cmd == "sem":
            need(words, 4, 6)
            return self.sem_command(words)
        if cmd == "bench":
            need(words, 2, 5)
            if words[1] == "mutex":
                need(words, 4, 4)
                return self.bench_mutex(words[2], parse_int(words[3], "cycles"))
            if words[1] == "contended":
                need(words, 5, 5)
                return self.bench_contended(words[2], parse_int(words[3], "sessions"), parse_seconds(words[4]))
            raise Usage("unknown bench: " + words[1])
        raise Usage("unknown command: " + cmd)

    def shutdown(self):
        for stack in self.leases.values():
            while stack:
                try:
                    stack.pop().release()
                except Exception:  # noqa: BLE001 - the session close removes it
                    pass
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def qualified(e):
    cls = type(e)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else module + "." + cls.__qualname__


def one_line(text):
    return text.replace("\r", " ").replace("\n", " ")


def watch_parent(parent):
    """Exits when the process that started us goes away (we get reparented),
    even while the main thread is blocked in an acquire: an orphaned peer
    must not keep holding locks or sessions."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            sys.stderr.write("kazoo_peer: parent %d is gone; exiting\n" % parent)
            os._exit(4)


def main():
    # The protocol owns the real stdout; anything else printed goes to stderr.
    proto = sys.stdout
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    def say(line):
        proto.write(line + "\n")
        proto.flush()

    if len(sys.argv) != 2:
        sys.stderr.write("usage: kazoo_peer.py <connectString>\n")
        return 2
    session_ms = env_int("PEER_SESSION_MS", 10000)
    connect_ms = env_int("PEER_CONNECT_MS", 30000)
    client = new_client(sys.argv[1], session_ms)
    try:
        client.start(timeout=connect_ms / 1000.0)
    except Exception as e:  # noqa: BLE001 - reported, then exit
        sys.stderr.write("kazoo_peer: not connected to %s: %s: %s\n" % (sys.argv[1], qualified(e), e))
        client.close()
        return 3
    peer = Peer(sys.argv[1], session_ms, client)
    threading.Thread(target=watch_parent, args=(os.getppid(),), name="parent-watchdog", daemon=True).start()
    say("READY")
    for line in sys.stdin:
        words = line.split()
        quit_now = words == ["quit"]
        try:
            if quit_now:
                peer.shutdown()
                reply = "OK bye"
            else:
                reply = peer.dispatch(words)
        except Usage as e:
            reply = "ERR " + one_line(str(e))
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            reply = "ERR %s: %s" % (qualified(e), one_line(str(e) or "(no message) in: " + line.strip()))
        say(reply)
        if quit_now:
            return 0
    # stdin closed: the driver is gone.
    peer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
