// A line-protocol peer around Apache Curator's lock recipes, driven by
// latchkey's integration tests and benchmarks (tests/src/peers.rs).
//
// Usage: java -cp <curator classpath>:<classdir> CuratorPeer <connectString>
//
// Prints READY once connected, then answers every line read from stdin with
// exactly one line on stdout, starting with "OK" or "ERR <message>":
//
//   mutex <path> acquire [timeout_ms]       OK acquired | OK timeout
//   mutex <path> release                    OK released
//   mutex <path> participants               OK <node,node,...>
//   read|write <path> acquire [timeout_ms]  (InterProcessReadWriteLock)
//   read|write <path> release
//   read|write <path> participants
//   sem <path> <max> acquire [n] [timeout_ms]   OK acquired <n> | OK timeout
//   sem <path> <max> release                OK released   (one lease)
//   sem <path> <max> participants           OK <lease,lease,...>
//   children <path>                         OK <child,child,...> (sorted by name)
//   bench mutex <path> <cycles>             OK <cycles> <total_us> <p50_us> <p99_us>
//   bench contended <path> <sessions> <seconds>
//                                           OK <cycles> <elapsed_us> <handoff_p50_us> <handoff_p99_us>
//   ping                                    OK pong
//   quit                                    OK bye (then exits)
//
// Lists are comma-joined node names (last path segment); an empty list is
// "OK " (with the space). Every lock object is created once per (kind, path)
// and reused, so Curator's per-thread reentrancy applies; all commands run
// on the main thread. The peer exits when its parent process dies.
// Environment: PEER_SESSION_MS (session timeout, default 10000),
// PEER_CONNECT_MS (wait for the first connection, default 30000).

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;

public final class CuratorPeer {
    /** Wait for a bench session's first connection. */
    private static final long BENCH_CONNECT_MS = 30_000;
    /** Bound on one uncontended bench acquire. */
    private static final long BENCH_ACQUIRE_MS = 30_000;
    /** Extra time a contended bench's threads get to finish after the run. */
    private static final long BENCH_JOIN_GRACE_MS = 60_000;

    private final String connectString;
    private final int sessionMs;
    private final CuratorFramework client;
    private final PrintStream proto;

    private final Map<String, InterProcessMutex> mutexes = new HashMap<>();
    private final Map<String, InterProcessReadWriteLock> rwLocks = new HashMap<>();
    private final Map<String, InterProcessSemaphoreV2> semaphores = new HashMap<>();
    private final Map<String, Integer> semaphoreMax = new HashMap<>();
    private final Map<String, Deque<Lease>> leases = new HashMap<>();

    /** A command's reply; thrown exceptions become "ERR <class>: <message>". */
    private static final class Usage extends Exception {
        private static final long serialVersionUID = 1L;

        Usage(String message) {
            super(message);
        }
    }

    private CuratorPeer(String connectString, int sessionMs, CuratorFramework client, PrintStream proto) {
        this.connectString = connectString;
        this.sessionMs = sessionMs;
        this.client = client;
        this.proto = proto;
    }

    public static void main(String[] args) throws Exception {
        // The protocol owns the real stdout; anything a library prints goes
        // to stderr instead of corrupting it.
        PrintStream proto = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        if (args.length != 1) {
            System.err.println("usage: CuratorPeer <connectString>");
            System.exit(2);
        }
        int sessionMs = envInt("PEER_SESSION_MS", 10_000);
        int connectMs = envInt("PEER_CONNECT_MS", 30_000);
        CuratorFramework client = newClient(args[0], sessionMs);
        client.start();
        if (!client.blockUntilConnected(connectMs, TimeUnit.MILLISECONDS)) {
            System.err.println("CuratorPeer: not connected to " + args[0] + " within " + connectMs + " ms");
            client.close();
            System.exit(3);
        }
        CuratorPeer peer = new CuratorPeer(args[0], sessionMs, client, proto);
        watchParent();
        peer.say("READY");
        peer.run();
    }

    /**
     * Exits when the process that started us goes away (we get reparented),
     * even while the main thread is blocked in an acquire: an orphaned peer
     * must not keep holding locks or sessions.
     */
    private static void watchParent() {
        long parent = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
        Thread t = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(500);
                } catch (InterruptedException e) {
                    return;
                }
                long now = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
                if (now != parent) {
                    System.err.println("CuratorPeer: parent " + parent + " is gone; exiting");
                    Runtime.getRuntime().halt(4);
                }
            }
        }, "parent-watchdog");
        t.setDaemon(true);
        t.start();
    }

    private static int envInt(String name, int dflt) {
        String v = System.getenv(name);
        if (v == null || v.isBlank()) {
            return dflt;
        }
        return Integer.parseInt(v.trim());
    }

    private static CuratorFramework newClient(String connectString, int sessionMs) {
        return CuratorFrameworkFactory.builder()
                .connectString(connectString)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
    }

    private void say(String line) {
        proto.print(line);
        proto.print('\n');
        proto.flush();
    }

    private void run() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String reply;
            boolean quit = false;
            try {
                String[] words = line.trim().split("\\s+");
                if (words.length == 1 && words[0].equals("quit")) {
                    shutdown();
                    reply = "OK bye";
                    quit = true;
                } else {
                    reply = dispatch(words);
                }
            } catch (Usage e) {
                reply = "ERR " + oneLine(e.getMessage());
            } catch (Throwable e) {
                reply = "ERR " + e.getClass().getName() + ": " + oneLine(String.valueOf(e.getMessage()));
            }
            say(reply);
            if (quit) {
                System.exit(0);
            }
        }
        // stdin closed: the driver is gone.
        shutdown();
        System.exit(0);
    }

    private static String oneLine(String s) {
        return s.replace('\r', ' ').replace('\n', ' ');
    }

    private void shutdown() {
        for (Deque<Lease> stack : leases.values()) {
            while (!stack.isEmpty()) {
                try {
                    stack.pop().close();
                } catch (Exception e) {
                    // the session close below removes it anyway
                }
            }
        }
        client.close();
    }

    private String dispatch(String[] w) throws Exception {
        if (w.length == 0 || w[0].isEmpty()) {
            throw new Usage("empty command");
        }
        switch (w[0]) {
            case "ping":
                need(w, 1, 1);
                return "OK pong";
            case "children":
                need(w, 2, 2);
                return list(sorted(client.getChildren().forPath(w[1])));
            case "mutex":
                need(w, 3, 4);
                return lockCommand(mutex(w[1]), w, 2);
            case "read":
                need(w, 3, 4);
                return lockCommand(rwLock(w[1]).readLock(), w, 2);
            case "write":
                need(w, 3, 4);
                return lockCommand(rwLock(w[1]).writeLock(), w, 2);
            case "sem":
                need(w, 4, 6);
                return semCommand(w);
            case "bench":
                need(w, 2, 6);
                if (w[1].equals("mutex")) {
                    need(w, 4, 4);
                    return benchMutex(w[2], parseLong(w[3], "cycles"));
                }
                if (w[1].equals("contended")) {
                    need(w, 5, 5);
                    return benchContended(w[2], (int) parseLong(w[3], "sessions"), parseSeconds(w[4]));
                }
                throw new Usage("unknown bench: " + w[1]);
            default:
                throw new Usage("unknown command: " + w[0]);
        }
    }

    private static void need(String[] w, int min, int max) throws Usage {
        if (w.length < min || w.length > max) {
            throw new Usage("wrong number of arguments for " + w[0] + " (see CuratorPeer.java)");
        }
    }

    private static long parseLong(String s, String what) throws Usage {
        try {
            long v = Long.parseLong(s);
            if (v < 0) {
                throw new Usage(what + " must not be negative: " + s);
            }
            return v;
        } catch (NumberFormatException e) {
            throw new Usage("bad " + what + ": " + s);
        }
    }

    private static double parseSeconds(String s) throws Usage {
        try {
            double v = Double.parseDouble(s);
            if (!(v >= 0 && v <= 86_400)) {
                throw new Usage("seconds out of range: " + s);
            }
            return v;
        } catch (NumberFormatException e) {
            throw new Usage("bad seconds: " + s);
        }
    }

    private InterProcessMutex mutex(String path) {
        return mutexes.computeIfAbsent(path, p -> new InterProcessMutex(client, p));
    }

    private InterProcessReadWriteLock rwLock(String path) {
        return rwLocks.computeIfAbsent(path, p -> new InterProcessReadWriteLock(client, p));
    }

    /** acquire [timeout_ms] | release | participants, on a mutex-shaped lock. */
    private String lockCommand(InterProcessMutex lock, String[] w, int at) throws Exception {
        switch (w[at]) {
            case "acquire":
                if (w.length > at + 1) {
                    long ms = parseLong(w[at + 1], "timeout_ms");
                    return lock.acquire(ms, TimeUnit.MILLISECONDS) ? "OK acquired" : "OK timeout";
                }
                lock.acquire();
                return "OK acquired";
            case "release":
                if (w.length != at + 1) {
                    throw new Usage("release takes no arguments");
                }
                lock.release();
                return "OK released";
            case "participants":
                if (w.length != at + 1) {
                    throw new Usage("participants takes no arguments");
                }
                try {
                    return list(lastSegments(lock.getParticipantNodes()));
                } catch (KeeperException.NoNodeException e) {
                    return list(List.of());
                }
            default:
                throw new Usage("unknown lock operation: " + w[at]);
        }
    }

    private String semCommand(String[] w) throws Exception {
        String path = w[1];
        int max = (int) parseLong(w[2], "maxLeases");
        if (max < 1) {
            throw new Usage("maxLeases must be at least 1");
        }
        Integer known = semaphoreMax.get(path);
        if (known != null && known != max) {
            throw new Usage("semaphore " + path + " already used here with maxLeases " + known);
        }
        InterProcessSemaphoreV2 sem = semaphores.computeIfAbsent(path, p -> new InterProcessSemaphoreV2(client, p, max));
        semaphoreMax.put(path, max);
        Deque<Lease> stack = leases.computeIfAbsent(path, p -> new ArrayDeque<>());
        switch (w[3]) {
            case "acquire": {
                int n = w.length > 4 ? (int) parseLong(w[4], "n") : 1;
                if (n < 1) {
                    throw new Usage("n must be at least 1");
                }
                Collection<Lease> got;
                if (w.length > 5) {
                    got = sem.acquire(n, parseLong(w[5], "timeout_ms"), TimeUnit.MILLISECONDS);
                    if (got == null) {
                        return "OK timeout";
                    }
                } else {
                    got = sem.acquire(n);
                }
                for (Lease lease : got) {
                    stack.push(lease);
                }
                return "OK acquired " + got.size();
            }
            case "release":
                if (w.length != 4) {
                    throw new Usage("release takes no arguments");
                }
                if (stack.isEmpty()) {
                    throw new Usage("no lease held on " + path);
                }
                stack.pop().close();
                return "OK released";
            case "participants": {
                if (w.length != 4) {
                    throw new Usage("participants takes no arguments");
                }
                List<String> names;
                try {
                    names = lastSegments(sem.getParticipantNodes());
                } catch (KeeperException.NoNodeException e) {
                    names = new ArrayList<>();
                }
                // Curator returns the lease nodes in ZooKeeper's order; put
                // them in queue order (the sequence after "-lease-").
                names.sort((a, b) -> Integer.compare(sequenceOf(a), sequenceOf(b)));
                return list(names);
            }
            default:
                throw new Usage("unknown sem operation: " + w[3]);
        }
    }

    /** The signed sequence number after the last '-', as Curator sorts; 0 if none. */
    private static int sequenceOf(String node) {
        int dash = node.lastIndexOf('-');
        String digits = node.substring(dash + 1);
        if (dash > 0 && node.charAt(dash - 1) == '-') {
            digits = node.substring(dash);
        }
        try {
            return Integer.parseInt(digits);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    private static List<String> lastSegments(Collection<String> nodes) {
        List<String> out = new ArrayList<>();
        for (String n : nodes) {
            out.add(n.substring(n.lastIndexOf('/') + 1));
        }
        return out;
    }

    private static List<String> sorted(List<String> names) {
        List<String> out = new ArrayList<>(names);
        out.sort(null);
        return out;
    }

    private static String list(List<String> names) {
        return "OK " + String.join(",", names);
    }

    /** Nearest-rank percentile of sorted values, 0 when empty. */
    private static long percentile(long[] sortedValues, double p) {
        if (sortedValues.length == 0) {
            return 0;
        }
        int rank = (int) Math.ceil(p * sortedValues.length);
        return sortedValues[Math.min(sortedValues.length - 1, Math.max(0, rank - 1))];
    }

    private String benchMutex(String path, long cycles) throws Exception {
        if (cycles > 10_000_000) {
            throw new Usage("too many cycles: " + cycles);
        }
        InterProcessMutex m = new InterProcessMutex(client, path);
        long[] micros = new long[(int) cycles];
        long start = System.nanoTime();
        for (int i = 0; i < cycles; i++) {
            long t0 = System.nanoTime();
            if (!m.acquire(BENCH_ACQUIRE_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("bench mutex: not acquired within " + BENCH_ACQUIRE_MS + " ms (is " + path + " held?)");
            }
            m.release();
            micros[i] = (System.nanoTime() - t0) / 1000;
        }
        long total = (System.nanoTime() - start) / 1000;
        Arrays.sort(micros);
        return "OK " + cycles + " " + total + " " + percentile(micros, 0.50) + " " + percentile(micros, 0.99);
    }

    /**
     * sessions clients, one thread each, loop acquire/release on one path.
     * Each holder takes a generation number while it holds the lock (so the
     * numbers follow the order of ownership) and records when its acquire()
     * and its release() returned; handoff g = acquireEnd[g] - releaseEnd[g-1],
     * clamped at 0 (the next holder can see the deletion before the previous
     * holder's release() has returned).
     */
    private String benchContended(String path, int sessions, double seconds) throws Exception {
        if (sessions < 1 || sessions > 1000) {
            throw new Usage("sessions must be 1..1000: " + sessions);
        }
        List<CuratorFramework> clients = new ArrayList<>();
        try {
            for (int i = 0; i < sessions; i++) {
                CuratorFramework c = newClient(connectString, sessionMs);
                clients.add(c);
                c.start();
            }
            for (CuratorFramework c : clients) {
                if (!c.blockUntilConnected((int) BENCH_CONNECT_MS, TimeUnit.MILLISECONDS)) {
                    throw new Usage("bench contended: a session did not connect within " + BENCH_CONNECT_MS + " ms");
                }
            }
            AtomicLong generation = new AtomicLong();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            CountDownLatch go = new CountDownLatch(1);
            long runNanos = (long) (seconds * 1e9);
            long[] startHolder = new long[1];
            List<List<long[]>> records = new ArrayList<>();
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < sessions; i++) {
                InterProcessMutex m = new InterProcessMutex(clients.get(i), path);
                List<long[]> mine = new ArrayList<>();
                records.add(mine);
                Thread t = new Thread(() -> {
                    try {
                        go.await();
                        long end = startHolder[0] + runNanos;
                        while (failure.get() == null) {
                            long left = end - System.nanoTime();
                            if (left <= 0 || !m.acquire(left, TimeUnit.NANOSECONDS)) {
                                break;
                            }
                            long acquired = System.nanoTime();
                            long gen = generation.getAndIncrement();
                            m.release();
                            long released = System.nanoTime();
                            mine.add(new long[] {gen, acquired, released});
                        }
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    }
                }, "bench-contended-" + i);
                t.setDaemon(true);
                threads.add(t);
            }
            for (Thread t : threads) {
                t.start();
            }
            long start = System.nanoTime();
            startHolder[0] = start;
            go.countDown();
            long joinDeadline = start + runNanos + TimeUnit.MILLISECONDS.toNanos(BENCH_JOIN_GRACE_MS);
            for (Thread t : threads) {
                long left = joinDeadline - System.nanoTime();
                if (left > 0) {
                    TimeUnit.NANOSECONDS.timedJoin(t, left);
                }
                if (t.isAlive()) {
                    failure.compareAndSet(null, new IllegalStateException(t.getName() + " still running after the grace time"));
                }
            }
            long elapsed = (System.nanoTime() - start) / 1000;
            if (failure.get() != null) {
                for (Thread t : threads) {
                    t.interrupt();
                }
                Throwable e = failure.get();
                throw new Usage("bench contended: " + e.getClass().getName() + ": " + e.getMessage());
            }
            int total = (int) generation.get();
            long[] acquiredAt = new long[total];
            long[] releasedAt = new long[total];
            for (List<long[]> mine : records) {
                for (long[] r : mine) {
                    acquiredAt[(int) r[0]] = r[1];
                    releasedAt[(int) r[0]] = r[2];
                }
            }
            long[] handoffs = new long[Math.max(0, total - 1)];
            for (int g = 1; g < total; g++) {
                handoffs[g - 1] = Math.max(0, acquiredAt[g] - releasedAt[g - 1]) / 1000;
            }
            Arrays.sort(handoffs);
            return "OK " + total + " " + elapsed + " " + percentile(handoffs, 0.50) + " " + percentile(handoffs, 0.99);
        } finally {
            for (CuratorFramework c : clients) {
                c.close();
            }
        }
    }
}
