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
  bench floor <path> <cycles>             OK <cycles> <total_us> <p50_us> <p99_us>
                                          (raw create ephemeral-sequential + get_children + delete)
  bench mutex <path> <cycles>             OK <cycles> <total_us> <p50_us> <p99_us>
  bench contended <path> <sessions> <seconds> [mntr_host:port]
                                          OK <cycles> <elapsed_us> <handoff_p50_us> <handoff_p99_us>
                                             [<window_handoffs> <window_requests> <window_watch_events>]
  bench rw <path> <sessions> <seconds> <write_every>
                                          OK <ops> <elapsed_us> <acquire_p50_us> <acquire_p99_us> <writes>
  bench sem <path> <sessions> <max_leases> <seconds>
                                          OK <ops> <elapsed_us> <acquire_p50_us> <acquire_p99_us>
  bench hold <path> <sessions>            OK <sessions>  (each its own session holding <path>/s<i>)
  bench unhold                            OK released
  version                                 OK <kazoo version> python-<python version>
  ping                                    OK pong
  quit                                    OK bye (then exits)

Differences from Curator, all kazoo's own: its locks are not reentrant (a
second acquire of a held lock answers ERR instead of blocking); lock nodes
are <path>/<uuid hex>__lock__<10 digits> (read locks __rlock__); a kazoo
Semaphore object holds at most one lease, so "acquire n" takes n of them,
and its lease nodes are <path>/<uuid hex> (no sequence), guarded by a
sibling lock at <path>-__lock__. Participants list a lock's own kind of node
in sequence order and a semaphore's leases in creation (czxid) order.

The timed benches (contended, rw, sem) and the mntr window work as in
CuratorPeer.java: one session and thread per contender, ERR if an exclusive
lock ever has two holders, a reader overlaps a writer or too many leases
are out.

Environment: PEER_SESSION_MS (session timeout, default 10000),
PEER_CONNECT_MS (wait for the first connection, default 30000). The peer
exits when its parent process dies.
"""

import logging
import math
import os
import platform
import re
import socket
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NodeExistsError, NoNodeError
import kazoo.version

BENCH_CONNECT_S = 30.0
BENCH_ACQUIRE_S = 30.0
BENCH_JOIN_GRACE_S = 60.0
MNTR_TIMEOUT_S = 5.0
# The mntr summaries whose sums count watch events fired.
WATCH_SUMS = (
    "zk_sum_node_created_watch_count",
    "zk_sum_node_deleted_watch_count",
    "zk_sum_node_changed_watch_count",
    "zk_sum_node_children_watch_count",
)


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

def check_cycles(cycles):
    if cycles > 10000000:
        raise Usage("too many cycles: %d" % cycles)


def parse_sessions(text):
    sessions = parse_int(text, "sessions")
    if not 1 <= sessions <= 1000:
        raise Usage("sessions must be 1..1000: %d" % sessions)
    return sessions


def cycle_report(micros, total_us):
    """"OK <n> <total_us> <p50_us> <p99_us>" of per-cycle microseconds."""
    micros.sort()
    return "OK %d %d %d %d" % (len(micros), total_us, percentile(micros, 0.50), percentile(micros, 0.99))


def close_client(client):
    try:
        client.stop()
        client.close()
    except Exception:  # noqa: BLE001 - best effort
        pass


def sleep_until(at_ns):
    left = at_ns - time.perf_counter_ns()
    if left > 0:
        time.sleep(left / 1e9)


def mntr(host_port):
    """(zk_packets_received, watch events fired) from the server's mntr."""
    host, _, port = host_port.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=MNTR_TIMEOUT_S) as s:
        s.sendall(b"mntr")
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    packets, events = None, 0
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        kv = line.strip().split("\t")
        if len(kv) != 2:
            continue
        if kv[0] == "zk_packets_received":
            packets = int(kv[1])
        elif kv[0] in WATCH_SUMS:
            events += int(kv[1])
    if packets is None:
        raise Usage("no zk_packets_received in mntr (is mntr whitelisted?)")
    return packets, events


class Counter:
    """A thread-safe counter; add returns the new value."""

    def __init__(self):
        self._value = 0
        self._guard = threading.Lock()

    def add(self, n):
        with self._guard:
            self._value += n
            return self._value

    def get(self):
        with self._guard:
            return self._value


class Crew:
    """One session and one thread per contender, started together and run
    until a shared deadline; the first failure of any thread ends the run
    and is raised. Closes the sessions at the end."""

    def __init__(self, peer, sessions):
        self.clients = []
        self.failure = []
        self.threads = []
        self.go_event = threading.Event()
        self.start = 0
        self.end = 0
        try:
            for _ in range(sessions):
                c = new_client(peer.hosts, peer.session_ms)
                self.clients.append(c)
                c.start(timeout=BENCH_CONNECT_S)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def add(self, name, step):
        """step(left_seconds) runs one turn; returns False to stop."""

        def body():
            try:
                self.go_event.wait()
                while not self.failure:
                    left = self.end - time.perf_counter_ns()
                    if left <= 0 or not step(left / 1e9):
                        break
            except BaseException as e:  # noqa: B902 - reported as ERR
                self.failure.append(e)

        self.threads.append(threading.Thread(target=body, name=name, daemon=True))

    def go(self, run_ns):
        for t in self.threads:
            t.start()
        self.start = time.perf_counter_ns()
        self.end = self.start + run_ns
        self.go_event.set()

    def join(self, what):
        """Waits for every thread; returns the elapsed microseconds or raises
        the first failure."""
        grace_end = self.end + int(BENCH_JOIN_GRACE_S * 1e9)
        for t in self.threads:
            t.join(max(0.0, (grace_end - time.perf_counter_ns()) / 1e9))
            if t.is_alive():
                self.failure.append(RuntimeError(t.name + " still running after the grace time"))
        elapsed = (time.perf_counter_ns() - self.start) // 1000
        if self.failure:
            e = self.failure[0]
            raise Usage("bench %s: %s: %s" % (what, qualified(e), e))
        return elapsed

    def close(self):
        while self.clients:
            close_client(self.clients.pop())



class Peer:
    def __init__(self, hosts, session_ms, client):
        self.hosts = hosts
        self.session_ms = session_ms
        self.client = client
        self.locks = {}  # (kind, path) -> kazoo lock
        self.sem_max = {}  # path -> max leases
        self.leases = {}  # path -> [Semaphore holding one lease]
        self.held = []  # sessions opened by "bench hold"

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

    def bench_floor(self, path, cycles):
        """The floor under a lock cycle on kazoo's own client: create an
        ephemeral-sequential node, list the children, delete the node."""
        check_cycles(cycles)
        try:
            self.client.create(path, makepath=True)
        except NodeExistsError:
            pass
        micros = []
        start = time.perf_counter_ns()
        for _ in range(cycles):
            t0 = time.perf_counter_ns()
            node = self.client.create(path + "/lock-", ephemeral=True, sequence=True)
            self.client.get_children(path)
            self.client.delete(node)
            micros.append((time.perf_counter_ns() - t0) // 1000)
        return cycle_report(micros, (time.perf_counter_ns() - start) // 1000)

    def bench_mutex(self, path, cycles):
        check_cycles(cycles)
        lock = self.client.Lock(path)
        micros = []
        start = time.perf_counter_ns()
        for _ in range(cycles):
            t0 = time.perf_counter_ns()
            if not try_acquire(lock, BENCH_ACQUIRE_S):
                raise Usage("bench mutex: not acquired within %d s (is %s held?)" % (BENCH_ACQUIRE_S, path))
            lock.release()
            micros.append((time.perf_counter_ns() - t0) // 1000)
        return cycle_report(micros, (time.perf_counter_ns() - start) // 1000)

    def bench_contended(self, path, sessions, seconds, mntr_addr):
        """Same measurement as CuratorPeer.benchContended: each holder takes a
        generation number while holding the lock; handoff g is the time from
        holder g-1's release() returning to holder g's acquire() returning,
        clamped at 0."""
        with Crew(self, sessions) as crew:
            generation = [0]
            holders = Counter()
            records = []

            def step(lock, mine, left_s):
                if not try_acquire(lock, left_s):
                    return False
                acquired = time.perf_counter_ns()
                if holders.add(1) != 1:
                    raise RuntimeError("two holders of %s at once" % path)
                gen = generation[0]
                generation[0] += 1
                holders.add(-1)
                lock.release()
                mine.append((gen, acquired, time.perf_counter_ns()))
                return True

            for i, c in enumerate(crew.clients):
                mine = []
                records.append(mine)
                lock = c.Lock(path)
                crew.add("bench-contended-%d" % i, lambda left, lock=lock, mine=mine: step(lock, mine, left))
            run_ns = int(seconds * 1e9)
            crew.go(run_ns)
            window = ""
            if mntr_addr is not None:
                # The steady middle of the run: no session set-up or tear-down.
                sleep_until(crew.start + run_ns // 4)
                g0, m0 = generation[0], mntr(mntr_addr)
                sleep_until(crew.start + run_ns * 3 // 4)
                g1, m1 = generation[0], mntr(mntr_addr)
                window = " %d %d %d" % (g1 - g0, m1[0] - m0[0], m1[1] - m0[1])
            elapsed = crew.join("contended")
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
            return "OK %d %d %d %d%s" % (
                total, elapsed, percentile(handoffs, 0.50), percentile(handoffs, 0.99), window)

    def bench_rw(self, path, sessions, seconds, write_every):
        """Read-write lock, mostly readers: every session loops taking the
        read lock, and the write lock on every write_every-th turn."""
        if write_every < 1:
            raise Usage("write_every must be at least 1")
        with Crew(self, sessions) as crew:
            readers = Counter()
            writers = Counter()
            writes = Counter()
            latencies = []

            def step(locks, turn, mine, left_s):
                write = turn[0] % write_every == 0
                turn[0] += 1
                lock = locks[1] if write else locks[0]
                t0 = time.perf_counter_ns()
                if not try_acquire(lock, left_s):
                    return False
                mine.append((time.perf_counter_ns() - t0) // 1000)
                if write:
                    if writers.add(1) != 1 or readers.get() != 0:
                        raise RuntimeError("a writer of %s is not alone" % path)
                    writes.add(1)
                    writers.add(-1)
                else:
                    readers.add(1)
                    if writers.get() != 0:
                        raise RuntimeError("a reader of %s overlaps a writer" % path)
                    readers.add(-1)
                lock.release()
                return True

            for i, c in enumerate(crew.clients):
                mine = []
                latencies.append(mine)
                locks = (c.ReadLock(path), c.WriteLock(path))
                crew.add("bench-rw-%d" % i,
                         lambda left, locks=locks, turn=[i], mine=mine: step(locks, turn, mine, left))
            crew.go(int(seconds * 1e9))
            elapsed = crew.join("rw")
            merged = sorted(v for mine in latencies for v in mine)
            return "OK %d %d %d %d %d" % (
                len(merged), elapsed, percentile(merged, 0.50), percentile(merged, 0.99), writes.get())

    def bench_sem(self, path, sessions, max_leases, seconds):
        """Semaphore leases: every session loops taking one lease and
        returning it."""
        if max_leases < 1:
            raise Usage("max_leases must be at least 1")
        with Crew(self, sessions) as crew:
            out = Counter()
            latencies = []

            def step(sem, mine, left_s):
                t0 = time.perf_counter_ns()
                if not try_acquire(sem, left_s):
                    return False
                mine.append((time.perf_counter_ns() - t0) // 1000)
                if out.add(1) > max_leases:
                    raise RuntimeError("more than %d leases of %s out" % (max_leases, path))
                out.add(-1)
                sem.release()
                return True

            for i, c in enumerate(crew.clients):
                mine = []
                latencies.append(mine)
                sem = c.Semaphore(path, max_leases=max_leases)
                crew.add("bench-sem-%d" % i, lambda left, sem=sem, mine=mine: step(sem, mine, left))
            crew.go(int(seconds * 1e9))
            elapsed = crew.join("sem")
            merged = sorted(v for mine in latencies for v in mine)
            return "OK %d %d %d %d" % (len(merged), elapsed, percentile(merged, 0.50), percentile(merged, 0.99))

    def bench_hold(self, path, sessions):
        """Opens sessions that each take and keep a lock (for memory readings)."""
        self.unhold()
        for i in range(sessions):
            c = new_client(self.hosts, self.session_ms)
            self.held.append(c)
            c.start(timeout=BENCH_CONNECT_S)
            if not try_acquire(c.Lock("%s/s%d" % (path, i)), BENCH_ACQUIRE_S):
                raise Usage("bench hold: %s/s%d not acquired within %d s" % (path, i, BENCH_ACQUIRE_S))
        return "OK %d" % sessions

    def unhold(self):
        while self.held:
            close_client(self.held.pop())

    # ----- dispatch ----------------------------------------------------

    def dispatch(self, words):
        if not words:
            raise Usage("empty command")
        cmd = words[0]
        if cmd == "ping":
            need(words, 1, 1)
            return "OK pong"
        if cmd == "version":
            need(words, 1, 1)
            return "OK %s python-%s" % (kazoo.version.__version__, platform.python_version())
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
            need(words, 2, 6)
            kind = words[1]
            if kind == "floor":
                need(words, 4, 4)
                return self.bench_floor(words[2], parse_int(words[3], "cycles"))
            if kind == "mutex":
                need(words, 4, 4)
                return self.bench_mutex(words[2], parse_int(words[3], "cycles"))
            if kind == "contended":
                need(words, 5, 6)
                mntr_addr = words[5] if len(words) > 5 else None
                return self.bench_contended(words[2], parse_sessions(words[3]), parse_seconds(words[4]), mntr_addr)
            if kind == "rw":
                need(words, 6, 6)
                return self.bench_rw(words[2], parse_sessions(words[3]), parse_seconds(words[4]),
                                     parse_int(words[5], "write_every"))
            if kind == "sem":
                need(words, 6, 6)
                return self.bench_sem(words[2], parse_sessions(words[3]), parse_int(words[4], "max_leases"),
                                      parse_seconds(words[5]))
            if kind == "hold":
                need(words, 4, 4)
                return self.bench_hold(words[2], parse_sessions(words[3]))
            if kind == "unhold":
                need(words, 2, 2)
                self.unhold()
                return "OK released"
            raise Usage("unknown bench: " + kind)
        raise Usage("unknown command: " + cmd)

    def shutdown(self):
        self.unhold()
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
