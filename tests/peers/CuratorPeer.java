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
//   revoke <node path>                      OK revoked  (Curator's Revoker.attemptRevoke)
//   read55 <path> acquire | release         OK acquired <node> | OK released: Curator 5.5+'s
//                                           downgrade on the wire, for older Curator jars (see below)
//   sem <path> <max> acquire [n] [timeout_ms]   OK acquired <n> | OK timeout
//   sem <path> <max> release                OK released   (one lease)
//   sem <path> <max> participants           OK <lease,lease,...>
//   children <path>                         OK <child,child,...> (sorted by name)
//   count <path> <seed> get                 OK <count>  (a started SharedCount, seeded if new)
//   count <path> <seed> set <n>             OK set
//   value <path> <seed> get                 OK <hex>  (a started SharedValue per path; bytes as lowercase
//                                           hex, "-" for none)
//   value <path> <seed> versioned           OK <version> <hex>
//   value <path> <seed> set <hex>           OK set
//   value <path> <seed> tryset <hex>        OK true | OK false  (trySetValue on the current versioned value)
//   value <path> <seed> close               OK closed
//   value atomic <path> get                 OK <hex>  (DistributedAtomicValue, RetryNTimes(1000, 1))
//   value atomic <path> cas <expected> <new>    OK <succeeded> <pre hex> <post hex>
//   value atomic <path> tryset|force|init <hex> OK <succeeded> <pre hex> <post hex> | OK set | OK true|false
//   latch <path> <id> start                 OK started  (a LeaderLatch per path, id as node data)
//   latch <path> <id> has                   OK true | OK false  (hasLeadership)
//   latch <path> <id> await <ms>            OK true | OK false  (await(ms))
//   latch <path> <id> leader                OK <id>  (getLeader; empty if none)
//   latch <path> <id> participants          OK <id,id,...> in queue order, the leader first
//   latch <path> <id> close                 OK closed
//   selector <path> <id> start              OK started  (an auto-requeued LeaderSelector per path whose
//                                           takeLeadership leads until "release")
//   selector <path> <id> await <ms>         OK true | OK false  (leading within ms)
//   selector <path> <id> has                OK true | OK false
//   selector <path> <id> release            OK released  (ends the current term)
//   selector <path> <id> terms              OK <n>  (terms begun so far)
//   selector <path> <id> leader|participants|close   as for latch
//   atomic <path> get                       OK <value>  (DistributedAtomicLong, RetryNTimes(1000, 1))
//   atomic <path> add <delta>               OK <succeeded> <pre> <post>
//   atomic <path> bump <n>                  OK <successes>  (n increments in a row)
//   barrier <path> set | remove             OK set | OK removed  (DistributedBarrier)
//   barrier <path> wait <ms>                OK true | OK false
//   dbarrier <path> <members> enter <ms>    OK true | OK false  (one DistributedDoubleBarrier per path)
//   dbarrier <path> <members> leave <ms>    OK true | OK false
//   bench floor <path> <cycles>             OK <cycles> <total_us> <p50_us> <p99_us>
//                                           (raw create ephemeral-sequential + getChildren + delete)
//   bench mutex <path> <cycles>             OK <cycles> <total_us> <p50_us> <p99_us>
//   bench contended <path> <sessions> <seconds> [mntr_host:port]
//                                           OK <cycles> <elapsed_us> <handoff_p50_us> <handoff_p99_us>
//                                              [<window_handoffs> <window_requests> <window_watch_events>]
//   bench rw <path> <sessions> <seconds> <write_every>
//                                           OK <ops> <elapsed_us> <acquire_p50_us> <acquire_p99_us> <writes>
//   bench sem <path> <sessions> <max_leases> <seconds>
//                                           OK <ops> <elapsed_us> <acquire_p50_us> <acquire_p99_us>
//   bench hold <path> <sessions>            OK <sessions>  (each its own session holding <path>/s<i>)
//   bench unhold                            OK released
//   bench held <path> <locks> <probes>      OK <acquire_p50_us> <probe_p50_us> <probe_p99_us>
//                                           (the peer's client takes and keeps <locks> revocable mutexes
//                                           <path>/l<i>, then times <probes> more, each released at once)
//   bench heldcheck                         OK <held> <same_session 0|1> <first_node_there 0|1>
//   bench heldrelease                       OK released
//   bench waiters <path> <sessions> <threads> <seconds> <mntr_host:port>
//                                           as contended, with <threads> contenders spread over <sessions>
//   bench giveup <path> <sessions> <waiters> <mntr_host:port>
//                                           OK <requests> <watch_events> <overrun_us>: medians over 3
//                                           timed-out acquires queued in the middle of <waiters>
//   cachenode create|ephemeral <path> [data]  OK created  (parents as containers; for the cache tests)
//   cachenode set <path> <data>             OK set
//   cachenode delete <path>                 OK deleted  (children first)
//   cachenode fill <path> <n>               OK filled  (children 0..n-1, each with its index as data)
//   queue <kind> <path> put <item> [arg]    OK put  (kind plain|priority|delay|id, arg the priority, the
//                                           due time in epoch ms or the id; a producer-only queue per kind+path)
//   queue <kind> <path> putmulti <a,b,..> [arg]  OK put  (plain|priority|delay: one node, several items)
//   queue <kind> <path> consume [lockPath]  OK started  (a consumer queue per kind+path recording items)
//   queue <kind> <path> taken               OK <item,item,...> consumed so far, in order
//   queue <kind> <path> await <n> <ms>      OK true | OK false  (n items consumed within ms)
//   queue <kind> <path> close               OK closed  (the consumer queue)
//   queue id <path> remove <id>             OK <count>
//   queue simple <path> offer <item>        OK offered  (SimpleDistributedQueue)
//   queue simple <path> poll <ms>           OK item <item> | OK none
//   queue bench <path> <consumers> <items>  OK <items> <elapsed_us> <p50_us> <p99_us>: the peer's client
//                                           puts items one by one, <consumers> sessions take them
//   version                                 OK <curator version> java-<java version>
//   ping                                    OK pong
//   quit                                    OK bye (then exits)
//
// Lists are comma-joined node names (last path segment); an empty list is
// "OK " (with the space). Every lock object is created once per (kind, path)
// and reused, so Curator's per-thread reentrancy applies; all commands run
// on the main thread. The peer exits when its parent process dies.
//
// Timed benches ("contended", "rw", "sem") run one session and one thread
// per contender and fail (ERR) if two threads ever hold an exclusive lock at
// once, a reader overlaps a writer, or more than max_leases leases are out:
// a fast but wrong run cannot pass. With mntr_host:port, "contended" also
// reads the server's mntr counters at 1/4 and 3/4 of the run and reports
// the handoffs, requests received (zk_packets_received) and watch events
// fired (zk_sum_node_*_watch_count) between the two readings.
// Environment: PEER_SESSION_MS (session timeout, default 10000),
// PEER_CONNECT_MS (wait for the first connection, default 30000).

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;

public final class CuratorPeer {
    /** Wait for a bench session's first connection. */
    private static final long BENCH_CONNECT_MS = 30_000;
    /** Bound on one uncontended bench acquire. */
    private static final long BENCH_ACQUIRE_MS = 30_000;
    /** Extra time a contended bench's threads get to finish after the run. */
    private static final long BENCH_JOIN_GRACE_MS = 60_000;
    /** Most contender threads one timed bench runs. */
    private static final int MAX_BENCH_THREADS = 5_000;
    /** Timed-out acquires per "bench giveup", and the time between their deadlines. */
    private static final int QUITTERS = 3;
    private static final long QUIT_GAP_MS = 500;
    /** Bound on one "bench held" or "bench giveup" waiter's acquire. */
    private static final long SCALE_ACQUIRE_MS = 120_000;
    /** Bound on the mntr four-letter word's connect and read. */
    private static final int MNTR_TIMEOUT_MS = 5_000;
    /** The mntr summaries whose sums count watch events fired. */
    private static final List<String> WATCH_SUMS = List.of(
            "zk_sum_node_created_watch_count",
            "zk_sum_node_deleted_watch_count",
            "zk_sum_node_changed_watch_count",
            "zk_sum_node_children_watch_count");

    private final String connectString;
    private final int sessionMs;
    private final CuratorFramework client;
    private final PrintStream proto;

    private final Map<String, InterProcessMutex> mutexes = new HashMap<>();
    private final Map<String, InterProcessReadWriteLock> rwLocks = new HashMap<>();
    private final Map<String, Deque<String>> downgradeNodes = new HashMap<>();
    private final Map<String, InterProcessSemaphoreV2> semaphores = new HashMap<>();
    private final Map<String, Integer> semaphoreMax = new HashMap<>();
    private final Map<String, Deque<Lease>> leases = new HashMap<>();
    private final Map<String, SharedCount> counts = new HashMap<>();
    /** Mutexes taken and kept by "bench held" on the peer's own client. */
    private final List<InterProcessMutex> heldLocks = new ArrayList<>();
    private String heldPath;
    private long heldSession;
    private final Map<String, LeaderLatch> latches = new HashMap<>();
    private final Map<String, DistributedDoubleBarrier> doubleBarriers = new HashMap<>();
    private final Map<String, PeerSelector> selectors = new HashMap<>();

    /** A LeaderSelector whose term lasts until the driver says "release". */
    private static final class PeerSelector {
        final java.util.concurrent.Semaphore release = new java.util.concurrent.Semaphore(0);
        final java.util.concurrent.atomic.AtomicBoolean leading = new java.util.concurrent.atomic.AtomicBoolean();
        final AtomicInteger terms = new AtomicInteger();
        LeaderSelector selector;
    }
    /** Sessions opened by "bench hold", each holding one mutex. */
    private final List<CuratorFramework> held = new ArrayList<>();

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
        unhold();
        heldRelease();
        for (Deque<Lease> stack : leases.values()) {
            while (!stack.isEmpty()) {
                try {
                    stack.pop().close();
                } catch (Exception e) {
                    // the session close below removes it anyway
                }
            }
        }
        for (PeerSelector sel : selectors.values()) {
            sel.selector.close();
        }
        for (LeaderLatch latch : latches.values()) {
            try {
                latch.close();
            } catch (Exception e) {
                // closing the client below removes its node anyway
            }
        }
        for (SharedCount count : counts.values()) {
            try {
                count.close();
            } catch (IOException e) {
                // closing the client below stops its watch anyway
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
            case "version":
                need(w, 1, 1);
                return "OK " + curatorVersion() + " java-" + System.getProperty("java.version");
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
            case "revoke":
                need(w, 2, 2);
                Revoker.attemptRevoke(client, w[1]);
                return "OK revoked";
            case "read55":
                need(w, 3, 3);
                return read55Command(w[1], w[2]);
            case "sem":
                need(w, 4, 6);
                return semCommand(w);
            case "count":
                need(w, 4, 5);
                return countCommand(w);
            case "latch":
                need(w, 4, 5);
                return latchCommand(w);
            case "group":
                return groupCommand(w);
            case "selector":
                need(w, 4, 5);
                return selectorCommand(w);
            case "queue":
                return queueCommand(w);
            case "atomic":
                need(w, 3, 4);
                return atomicCommand(w);
            case "value":
                return valueCommand(w);
            case "barrier": {
                need(w, 3, 4);
                DistributedBarrier barrier = new DistributedBarrier(client, w[1]);
                switch (w[2]) {
                    case "set":
                        barrier.setBarrier();
                        return "OK set";
                    case "remove":
                        barrier.removeBarrier();
                        return "OK removed";
                    case "wait":
                        need(w, 4, 4);
                        return "OK " + barrier.waitOnBarrier(parseLong(w[3], "ms"), TimeUnit.MILLISECONDS);
                    default:
                        throw new Usage("unknown barrier operation: " + w[2]);
                }
            }
            case "dbarrier": {
                need(w, 5, 5);
                int members = (int) parseLong(w[2], "members");
                DistributedDoubleBarrier barrier =
                        doubleBarriers.computeIfAbsent(w[1], p -> new DistributedDoubleBarrier(client, p, members));
                long ms = parseLong(w[4], "ms");
                switch (w[3]) {
                    case "enter":
                        return "OK " + barrier.enter(ms, TimeUnit.MILLISECONDS);
                    case "leave":
                        return "OK " + barrier.leave(ms, TimeUnit.MILLISECONDS);
                    default:
                        throw new Usage("unknown dbarrier operation: " + w[3]);
                }
            }
            case "cachenode":
                return cacheNodeCommand(w);
            case "bench":
                need(w, 2, 7);
                switch (w[1]) {
                    case "floor":
                        need(w, 4, 4);
                        return benchFloor(w[2], parseLong(w[3], "cycles"));
                    case "mutex":
                        need(w, 4, 4);
                        return benchMutex(w[2], parseLong(w[3], "cycles"));
                    case "contended":
                        need(w, 5, 6);
                        return benchContended(w[2], sessions(w[3]), sessions(w[3]), parseSeconds(w[4]), w.length > 5 ? w[5] : null);
                    case "rw":
                        need(w, 6, 6);
                        return benchRw(w[2], sessions(w[3]), parseSeconds(w[4]), parseLong(w[5], "write_every"));
                    case "sem":
                        need(w, 6, 6);
                        return benchSem(w[2], sessions(w[3]), (int) parseLong(w[4], "max_leases"), parseSeconds(w[5]));
                    case "hold":
                        need(w, 4, 4);
                        return benchHold(w[2], sessions(w[3]));
                    case "unhold":
                        need(w, 2, 2);
                        unhold();
                        return "OK released";
                    case "held":
                        need(w, 5, 5);
                        return benchHeld(w[2], parseLong(w[3], "locks"), parseLong(w[4], "probes"));
                    case "heldcheck":
                        need(w, 2, 2);
                        return heldCheck();
                    case "heldrelease":
                        need(w, 2, 2);
                        heldRelease();
                        return "OK released";
                    case "waiters":
                        need(w, 7, 7);
                        return benchContended(w[2], sessions(w[3]), (int) parseLong(w[4], "threads"), parseSeconds(w[5]), w[6]);
                    case "giveup":
                        need(w, 6, 6);
                        return benchGiveUp(w[2], sessions(w[3]), (int) parseLong(w[4], "waiters"), w[5]);
                    default:
                        throw new Usage("unknown bench: " + w[1]);
                }
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

    /**
     * Curator 5.5+'s read lock taken by the thread that holds the write lock
     * (CURATOR-621), as it appears on the wire: an EPHEMERAL (not sequential)
     * protected node named __READ__ followed by the sequence of this
     * thread's write node, so that it sorts with the write node, ahead of
     * writers queued since. The Curator jars here may predate 5.5, whose read
     * node would queue at the end; this emulates the newer node beside them.
     * Only the node is emulated: whoever waits on it follows its own rules.
     */
    /** create | ephemeral | set | delete | fill: plain node changes for the cache tests. */
    private String cacheNodeCommand(String[] w) throws Exception {
        need(w, 3, 4);
        byte[] data = (w.length > 3 ? w[3] : "").getBytes(StandardCharsets.UTF_8);
        switch (w[1]) {
            case "create":
                client.create().creatingParentContainersIfNeeded().forPath(w[2], data);
                return "OK created";
            case "ephemeral":
                client.create().creatingParentContainersIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(w[2], data);
                return "OK created";
            case "set":
                need(w, 4, 4);
                client.setData().forPath(w[2], data);
                return "OK set";
            case "createz":
                client.create().compressed().creatingParentContainersIfNeeded().forPath(w[2], data);
                return "OK created";
            case "getz":
                need(w, 3, 3);
                return "OK " + new String(client.getData().decompressed().forPath(w[2]), StandardCharsets.UTF_8);
            case "delete":
                need(w, 3, 3);
                client.delete().deletingChildrenIfNeeded().forPath(w[2]);
                return "OK deleted";
            case "fill": {
                need(w, 4, 4);
                long n = parseLong(w[3], "n");
                for (long i = 0; i < n; i++) {
                    client.create().creatingParentContainersIfNeeded()
                            .forPath(w[2] + "/" + i, Long.toString(i).getBytes(StandardCharsets.UTF_8));
                }
                return "OK filled";
            }
            default:
                throw new Usage("unknown cachenode operation: " + w[1]);
        }
    }

    private String read55Command(String path, String op) throws Exception {
        Deque<String> nodes = downgradeNodes.computeIfAbsent(path, p -> new ArrayDeque<>());
        switch (op) {
            case "acquire": {
                InterProcessMutex write = rwLock(path).writeLock();
                if (!write.isOwnedByCurrentThread()) {
                    throw new Usage("read55 emulates a downgrade: take the write lock on " + path + " first");
                }
                java.lang.reflect.Method lockPath = InterProcessMutex.class.getDeclaredMethod("getLockPath");
                lockPath.setAccessible(true);
                String writeNode = (String) lockPath.invoke(write);
                String sequence = writeNode.substring(writeNode.lastIndexOf("__WRIT__") + "__WRIT__".length());
                String node = client.create()
                        .creatingParentContainersIfNeeded()
                        .withProtection()
                        .withMode(CreateMode.EPHEMERAL)
                        .forPath(path + "/__READ__" + sequence);
                nodes.push(node);
                return "OK acquired " + node.substring(node.lastIndexOf('/') + 1);
            }
            case "release":
                if (nodes.isEmpty()) {
                    throw new Usage("no read55 node on " + path);
                }
                client.delete().guaranteed().forPath(nodes.pop());
                return "OK released";
            default:
                throw new Usage("unknown read55 operation: " + op);
        }
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

    private final Map<String, org.apache.curator.framework.recipes.nodes.GroupMember> groups =
            new HashMap<>();

    /** group path id start | members | close: one Curator GroupMember per path. */
    private String groupCommand(String[] w) throws Exception {
        need(w, 4, 4);
        String path = w[1];
        switch (w[3]) {
            case "start": {
                if (groups.containsKey(path)) {
                    throw new Usage("a group member on " + path + " is already started");
                }
                org.apache.curator.framework.recipes.nodes.GroupMember member =
                        new org.apache.curator.framework.recipes.nodes.GroupMember(
                                client, path, w[2], w[2].getBytes(StandardCharsets.UTF_8));
                member.start();
                groups.put(path, member);
                return "OK started";
            }
            case "members": {
                org.apache.curator.framework.recipes.nodes.GroupMember member = groups.get(path);
                if (member == null) {
                    throw new Usage("no group member on " + path);
                }
                List<String> ids = new ArrayList<>(member.getCurrentMembers().keySet());
                java.util.Collections.sort(ids);
                return list(ids);
            }
            case "close": {
                org.apache.curator.framework.recipes.nodes.GroupMember member = groups.remove(path);
                if (member == null) {
                    throw new Usage("no group member on " + path);
                }
                member.close();
                return "OK closed";
            }
            default:
                throw new Usage("unknown group operation: " + w[3]);
        }
    }

    /** start | has | await ms | leader | participants | close, on one LeaderLatch per path. */
    private String latchCommand(String[] w) throws Exception {
        String path = w[1];
        switch (w[3]) {
            case "start": {
                need(w, 4, 4);
                if (latches.containsKey(path)) {
                    throw new Usage("a latch on " + path + " is already started");
                }
                LeaderLatch latch = new LeaderLatch(client, path, w[2]);
                latch.start();
                latches.put(path, latch);
                return "OK started";
            }
            case "close":
                need(w, 4, 4);
                latch(path).close();
                latches.remove(path);
                return "OK closed";
            case "has":
                need(w, 4, 4);
                return "OK " + latch(path).hasLeadership();
            case "await":
                need(w, 5, 5);
                return "OK " + latch(path).await(parseLong(w[4], "ms"), TimeUnit.MILLISECONDS);
            case "leader":
                need(w, 4, 4);
                return "OK " + latch(path).getLeader().getId();
            case "participants": {
                need(w, 4, 4);
                List<String> ids = new ArrayList<>();
                for (Participant p : latch(path).getParticipants()) {
                    ids.add(p.getId());
                }
                return list(ids);
            }
            default:
                throw new Usage("unknown latch operation: " + w[3]);
        }
    }

    /** start | await ms | has | release | terms | leader | participants | close. */
    private String selectorCommand(String[] w) throws Exception {
        String path = w[1];
        if (w[3].equals("start")) {
            need(w, 4, 4);
            if (selectors.containsKey(path)) {
                throw new Usage("a selector on " + path + " is already started");
            }
            PeerSelector sel = new PeerSelector();
            sel.selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework c) throws Exception {
                    sel.terms.incrementAndGet();
                    sel.leading.set(true);
                    try {
                        sel.release.acquire();
                    } finally {
                        sel.leading.set(false);
                    }
                }
            });
            sel.selector.setId(w[2]);
            sel.selector.autoRequeue();
            sel.selector.start();
            selectors.put(path, sel);
            return "OK started";
        }
        PeerSelector sel = selectors.get(path);
        if (sel == null) {
            throw new Usage("no selector started on " + path);
        }
        switch (w[3]) {
            case "await": {
                need(w, 5, 5);
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(parseLong(w[4], "ms"));
                while (!sel.leading.get() && System.nanoTime() < until) {
                    Thread.sleep(10);
                }
                return "OK " + sel.leading.get();
            }
            case "has":
                need(w, 4, 4);
                return "OK " + sel.selector.hasLeadership();
            case "release":
                need(w, 4, 4);
                sel.release.release();
                return "OK released";
            case "terms":
                need(w, 4, 4);
                return "OK " + sel.terms.get();
            case "leader":
                need(w, 4, 4);
                return "OK " + sel.selector.getLeader().getId();
            case "participants": {
                need(w, 4, 4);
                List<String> ids = new ArrayList<>();
                for (Participant p : sel.selector.getParticipants()) {
                    ids.add(p.getId());
                }
                return list(ids);
            }
            case "close":
                need(w, 4, 4);
                sel.selector.close();
                selectors.remove(path);
                return "OK closed";
            default:
                throw new Usage("unknown selector operation: " + w[3]);
        }
    }

    /** get | add delta | bump n, on a DistributedAtomicLong. */
    private String atomicCommand(String[] w) throws Exception {
        DistributedAtomicLong counter = new DistributedAtomicLong(
                client, w[1], new org.apache.curator.retry.RetryNTimes(1000, 1));
        switch (w[2]) {
            case "get":
                need(w, 3, 3);
                return "OK " + counter.get().postValue();
            case "add": {
                need(w, 4, 4);
                AtomicValue<Long> v = counter.add(Long.parseLong(w[3]));
                return "OK " + v.succeeded() + " " + v.preValue() + " " + v.postValue();
            }
            case "bump": {
                need(w, 4, 4);
                long n = parseLong(w[3], "n");
                long ok = 0;
                for (long i = 0; i < n; i++) {
                    if (counter.increment().succeeded()) {
                        ok++;
                    }
                }
                return "OK " + ok;
            }
            default:
                throw new Usage("unknown atomic operation: " + w[2]);
        }
    }

    private LeaderLatch latch(String path) throws Usage {
        LeaderLatch latch = latches.get(path);
        if (latch == null) {
            throw new Usage("no latch started on " + path);
        }
        return latch;
    }

    /** SharedValue (one started per path) and DistributedAtomicValue commands. */
    private final Map<String, org.apache.curator.framework.recipes.shared.SharedValue> sharedValues =
            new HashMap<>();

    private String valueCommand(String[] w) throws Exception {
        need(w, 4, 6);
        if (w[1].equals("atomic")) {
            return atomicValueCommand(w);
        }
        org.apache.curator.framework.recipes.shared.SharedValue value = sharedValues.get(w[1]);
        if (value == null) {
            value = new org.apache.curator.framework.recipes.shared.SharedValue(client, w[1], fromHex(w[2]));
            value.start();
            sharedValues.put(w[1], value);
        }
        switch (w[3]) {
            case "get":
                need(w, 4, 4);
                return "OK " + hex(value.getValue());
            case "versioned": {
                need(w, 4, 4);
                org.apache.curator.framework.recipes.shared.VersionedValue<byte[]> v = value.getVersionedValue();
                return "OK " + v.getVersion() + " " + hex(v.getValue());
            }
            case "set":
                need(w, 5, 5);
                value.setValue(fromHex(w[4]));
                return "OK set";
            case "tryset":
                need(w, 5, 5);
                return "OK " + value.trySetValue(value.getVersionedValue(), fromHex(w[4]));
            case "close":
                need(w, 4, 4);
                sharedValues.remove(w[1]);
                value.close();
                return "OK closed";
            default:
                throw new Usage("unknown value operation: " + w[3]);
        }
    }

    private String atomicValueCommand(String[] w) throws Exception {
        org.apache.curator.framework.recipes.atomic.DistributedAtomicValue value =
                new org.apache.curator.framework.recipes.atomic.DistributedAtomicValue(
                        client, w[2], new org.apache.curator.retry.RetryNTimes(1000, 1));
        switch (w[3]) {
            case "get":
                need(w, 4, 4);
                return "OK " + hex(value.get().postValue());
            case "cas":
                need(w, 6, 6);
                return atomicValueLine(value.compareAndSet(fromHex(w[4]), fromHex(w[5])));
            case "tryset":
                need(w, 5, 5);
                return atomicValueLine(value.trySet(fromHex(w[4])));
            case "force":
                need(w, 5, 5);
                value.forceSet(fromHex(w[4]));
                return "OK set";
            case "init":
                need(w, 5, 5);
                return "OK " + value.initialize(fromHex(w[4]));
            default:
                throw new Usage("unknown atomic value operation: " + w[3]);
        }
    }

    private static String atomicValueLine(AtomicValue<byte[]> v) {
        return "OK " + v.succeeded() + " " + hex(v.preValue()) + " " + hex(v.postValue());
    }

    /** Bytes as lowercase hex; "-" for none (null or empty). */
    private static String hex(byte[] bytes) {
        if (bytes == null || bytes.length == 0) {
            return "-";
        }
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) {
            out.append(String.format("%02x", b & 0xff));
        }
        return out.toString();
    }

    private static byte[] fromHex(String s) throws Usage {
        if (s.equals("-")) {
            return new byte[0];
        }
        if (s.length() % 2 != 0) {
            throw new Usage("bad hex: " + s);
        }
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            int hi = Character.digit(s.charAt(2 * i), 16);
            int lo = Character.digit(s.charAt(2 * i + 1), 16);
            if (hi < 0 || lo < 0) {
                throw new Usage("bad hex: " + s);
            }
            out[i] = (byte) (hi * 16 + lo);
        }
        return out;
    }

    /** get | set n, on one started SharedCount per path. */
    private String countCommand(String[] w) throws Exception {
        SharedCount count = counts.get(w[1]);
        if (count == null) {
            count = new SharedCount(client, w[1], parseInt(w[2], "seed"));
            count.start();
            counts.put(w[1], count);
        }
        switch (w[3]) {
            case "get":
                need(w, 4, 4);
                return "OK " + count.getCount();
            case "set":
                need(w, 5, 5);
                count.setCount(parseInt(w[4], "count"));
                return "OK set";
            default:
                throw new Usage("unknown count operation: " + w[3]);
        }
    }

    private static int parseInt(String s, String what) throws Usage {
        try {
            return Integer.parseInt(s);
        } catch (NumberFormatException e) {
            throw new Usage("bad " + what + ": " + s);
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

    private static void checkCycles(long cycles) throws Usage {
        if (cycles > 10_000_000) {
            throw new Usage("too many cycles: " + cycles);
        }
    }

    private static int sessions(String s) throws Usage {
        long n = parseLong(s, "sessions");
        if (n < 1 || n > 1000) {
            throw new Usage("sessions must be 1..1000: " + s);
        }
        return (int) n;
    }

    /** "OK <n> <total_us> <p50_us> <p99_us>" of per-cycle microseconds. */
    private static String cycleReport(long[] micros, long totalMicros) {
        Arrays.sort(micros);
        return "OK " + micros.length + " " + totalMicros + " " + percentile(micros, 0.50) + " " + percentile(micros, 0.99);
    }

    /**
     * The floor under a lock cycle on Curator's own client: create an
     * ephemeral-sequential node, list the children, delete the node.
     */
    private String benchFloor(String path, long cycles) throws Exception {
        checkCycles(cycles);
        try {
            client.create().creatingParentContainersIfNeeded().forPath(path);
        } catch (KeeperException.NodeExistsException e) {
            // already there
        }
        long[] micros = new long[(int) cycles];
        long start = System.nanoTime();
        for (int i = 0; i < cycles; i++) {
            long t0 = System.nanoTime();
            String node = client.create().withMode(CreateMode.EPHEMERAL_SEQUENTIAL).forPath(path + "/lock-");
            client.getChildren().forPath(path);
            client.delete().forPath(node);
            micros[i] = (System.nanoTime() - t0) / 1000;
        }
        return cycleReport(micros, (System.nanoTime() - start) / 1000);
    }

    private String benchMutex(String path, long cycles) throws Exception {
        checkCycles(cycles);
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
        return cycleReport(micros, (System.nanoTime() - start) / 1000);
    }

    /** The body of one contender's loop; returns false to stop. */
    private interface Step {
        boolean run(long leftNanos) throws Exception;
    }

    /**
     * One session and one thread per contender, started together and run
     * until a shared deadline; the first failure of any thread ends the run
     * and is thrown. Closes the sessions at the end.
     */
    private final class Crew implements AutoCloseable {
        final List<CuratorFramework> clients = new ArrayList<>();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        private final List<Thread> threads = new ArrayList<>();
        private final CountDownLatch go = new CountDownLatch(1);
        private volatile long end;
        long start;

        Crew(int sessions) throws Exception {
            for (int i = 0; i < sessions; i++) {
                CuratorFramework c = newClient(connectString, sessionMs);
                clients.add(c);
                c.start();
            }
            for (CuratorFramework c : clients) {
                if (!c.blockUntilConnected((int) BENCH_CONNECT_MS, TimeUnit.MILLISECONDS)) {
                    throw new Usage("bench: a session did not connect within " + BENCH_CONNECT_MS + " ms");
                }
            }
        }

        void add(String name, Step step) {
            Thread t = new Thread(() -> {
                try {
                    go.await();
                    while (failure.get() == null) {
                        long left = end - System.nanoTime();
                        if (left <= 0 || !step.run(left)) {
                            break;
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }, name);
            t.setDaemon(true);
            threads.add(t);
        }

        /** Starts every thread; the run lasts runNanos from now. */
        void go(long runNanos) {
            for (Thread t : threads) {
                t.start();
            }
            start = System.nanoTime();
            end = start + runNanos;
            go.countDown();
        }

        /** Waits for every thread; returns the elapsed microseconds or throws the first failure. */
        long join(String what) throws Usage {
            long joinDeadline = end + TimeUnit.MILLISECONDS.toNanos(BENCH_JOIN_GRACE_MS);
            for (Thread t : threads) {
                long left = joinDeadline - System.nanoTime();
                if (left > 0) {
                    try {
                        TimeUnit.NANOSECONDS.timedJoin(t, left);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                if (t.isAlive()) {
                    failure.compareAndSet(null, new IllegalStateException(t.getName() + " still running after the grace time"));
                }
            }
            long elapsed = (System.nanoTime() - start) / 1000;
            Throwable e = failure.get();
            if (e != null) {
                for (Thread t : threads) {
                    t.interrupt();
                }
                throw new Usage("bench " + what + ": " + e.getClass().getName() + ": " + e.getMessage());
            }
            return elapsed;
        }

        @Override
        public void close() {
            for (CuratorFramework c : clients) {
                c.close();
            }
        }
    }

    /** Sleeps until System.nanoTime() reaches at. */
    private static void sleepUntil(long at) throws InterruptedException {
        long left = at - System.nanoTime();
        if (left > 0) {
            TimeUnit.NANOSECONDS.sleep(left);
        }
    }

    /** [zk_packets_received, watch events fired] from the server's mntr. */
    private static long[] mntr(String hostPort) throws IOException {
        int colon = hostPort.lastIndexOf(':');
        if (colon < 0) {
            throw new IOException("mntr address needs host:port: " + hostPort);
        }
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(hostPort.substring(0, colon), Integer.parseInt(hostPort.substring(colon + 1))), MNTR_TIMEOUT_MS);
            s.setSoTimeout(MNTR_TIMEOUT_MS);
            OutputStream out = s.getOutputStream();
            out.write("mntr".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            String text = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            long packets = -1;
            long events = 0;
            for (String line : text.split("\n")) {
                String[] kv = line.trim().split("\t");
                if (kv.length != 2) {
                    continue;
                }
                if (kv[0].equals("zk_packets_received")) {
                    packets = Long.parseLong(kv[1]);
                } else if (WATCH_SUMS.contains(kv[0])) {
                    events += Long.parseLong(kv[1]);
                }
            }
            if (packets < 0) {
                throw new IOException("no zk_packets_received in mntr (is mntr whitelisted?)");
            }
            return new long[] {packets, events};
        }
    }

    /**
     * sessions clients, one thread each, loop acquire/release on one path.
     * Each holder takes a generation number while it holds the lock (so the
     * numbers follow the order of ownership) and records when its acquire()
     * and its release() returned; handoff g = acquireEnd[g] - releaseEnd[g-1],
     * clamped at 0 (the next holder can see the deletion before the previous
     * holder's release() has returned).
     */
    private String benchContended(String path, int sessions, int threads, double seconds, String mntrAddr) throws Exception {
        if (threads < 1 || threads > MAX_BENCH_THREADS) {
            throw new Usage("threads must be 1.." + MAX_BENCH_THREADS + ": " + threads);
        }
        try (Crew crew = new Crew(sessions)) {
            AtomicLong generation = new AtomicLong();
            AtomicInteger holders = new AtomicInteger();
            List<List<long[]>> records = new ArrayList<>();
            for (int i = 0; i < threads; i++) {
                InterProcessMutex m = new InterProcessMutex(crew.clients.get(i % sessions), path);
                List<long[]> mine = new ArrayList<>();
                records.add(mine);
                crew.add("bench-contended-" + i, left -> {
                    if (!m.acquire(left, TimeUnit.NANOSECONDS)) {
                        return false;
                    }
                    long acquired = System.nanoTime();
                    if (holders.incrementAndGet() != 1) {
                        throw new IllegalStateException("two holders of " + path + " at once");
                    }
                    long gen = generation.getAndIncrement();
                    holders.decrementAndGet();
                    m.release();
                    mine.add(new long[] {gen, acquired, System.nanoTime()});
                    return true;
                });
            }
            long runNanos = (long) (seconds * 1e9);
            crew.go(runNanos);
            String window = "";
            if (mntrAddr != null) {
                // The steady middle of the run: no session set-up or tear-down.
                sleepUntil(crew.start + runNanos / 4);
                long g0 = generation.get();
                long[] m0 = mntr(mntrAddr);
                sleepUntil(crew.start + runNanos * 3 / 4);
                long g1 = generation.get();
                long[] m1 = mntr(mntrAddr);
                window = " " + (g1 - g0) + " " + (m1[0] - m0[0]) + " " + (m1[1] - m0[1]);
            }
            long elapsed = crew.join("contended");
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
            return "OK " + total + " " + elapsed + " " + percentile(handoffs, 0.50) + " " + percentile(handoffs, 0.99) + window;
        }
    }

    /** Acquire latencies (µs) of every thread, merged and sorted. */
    private static long[] merged(List<List<Long>> perThread) {
        long[] all = perThread.stream().flatMap(List::stream).mapToLong(Long::longValue).toArray();
        Arrays.sort(all);
        return all;
    }

    /**
     * Read-write lock, mostly readers: every session loops taking the read
     * lock, and the write lock on every write_every-th turn.
     */
    private String benchRw(String path, int sessions, double seconds, long writeEvery) throws Exception {
        if (writeEvery < 1) {
            throw new Usage("write_every must be at least 1");
        }
        try (Crew crew = new Crew(sessions)) {
            AtomicInteger readers = new AtomicInteger();
            AtomicInteger writers = new AtomicInteger();
            AtomicLong writes = new AtomicLong();
            List<List<Long>> latencies = new ArrayList<>();
            for (int i = 0; i < sessions; i++) {
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(crew.clients.get(i), path);
                List<Long> mine = new ArrayList<>();
                latencies.add(mine);
                long[] turn = {i};
                crew.add("bench-rw-" + i, left -> {
                    boolean write = turn[0]++ % writeEvery == 0;
                    InterProcessMutex lock = write ? rw.writeLock() : rw.readLock();
                    long t0 = System.nanoTime();
                    if (!lock.acquire(left, TimeUnit.NANOSECONDS)) {
                        return false;
                    }
                    mine.add((System.nanoTime() - t0) / 1000);
                    if (write) {
                        if (writers.incrementAndGet() != 1 || readers.get() != 0) {
                            throw new IllegalStateException("a writer of " + path + " is not alone");
                        }
                        writes.incrementAndGet();
                        writers.decrementAndGet();
                    } else {
                        readers.incrementAndGet();
                        if (writers.get() != 0) {
                            throw new IllegalStateException("a reader of " + path + " overlaps a writer");
                        }
                        readers.decrementAndGet();
                    }
                    lock.release();
                    return true;
                });
            }
            crew.go((long) (seconds * 1e9));
            long elapsed = crew.join("rw");
            long[] all = merged(latencies);
            return "OK " + all.length + " " + elapsed + " " + percentile(all, 0.50) + " " + percentile(all, 0.99) + " " + writes.get();
        }
    }

    /** Semaphore leases: every session loops taking one lease and returning it. */
    private String benchSem(String path, int sessions, int maxLeases, double seconds) throws Exception {
        if (maxLeases < 1) {
            throw new Usage("max_leases must be at least 1");
        }
        try (Crew crew = new Crew(sessions)) {
            AtomicInteger out = new AtomicInteger();
            List<List<Long>> latencies = new ArrayList<>();
            for (int i = 0; i < sessions; i++) {
                InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(crew.clients.get(i), path, maxLeases);
                List<Long> mine = new ArrayList<>();
                latencies.add(mine);
                crew.add("bench-sem-" + i, left -> {
                    long t0 = System.nanoTime();
                    Lease lease = sem.acquire(left, TimeUnit.NANOSECONDS);
                    if (lease == null) {
                        return false;
                    }
                    mine.add((System.nanoTime() - t0) / 1000);
                    if (out.incrementAndGet() > maxLeases) {
                        throw new IllegalStateException("more than " + maxLeases + " leases of " + path + " out");
                    }
                    out.decrementAndGet();
                    lease.close();
                    return true;
                });
            }
            crew.go((long) (seconds * 1e9));
            long elapsed = crew.join("sem");
            long[] all = merged(latencies);
            return "OK " + all.length + " " + elapsed + " " + percentile(all, 0.50) + " " + percentile(all, 0.99);
        }
    }

    /** Opens sessions that each take and keep a mutex (for memory readings). */
    private String benchHold(String path, int sessions) throws Exception {
        unhold();
        for (int i = 0; i < sessions; i++) {
            CuratorFramework c = newClient(connectString, sessionMs);
            held.add(c);
            c.start();
        }
        for (int i = 0; i < sessions; i++) {
            CuratorFramework c = held.get(i);
            if (!c.blockUntilConnected((int) BENCH_CONNECT_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("bench hold: a session did not connect within " + BENCH_CONNECT_MS + " ms");
            }
            if (!new InterProcessMutex(c, path + "/s" + i).acquire(BENCH_ACQUIRE_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("bench hold: " + path + "/s" + i + " not acquired within " + BENCH_ACQUIRE_MS + " ms");
            }
        }
        return "OK " + sessions;
    }

    private void unhold() {
        for (CuratorFramework c : held) {
            c.close();
        }
        held.clear();
    }

    /**
     * The peer's own client takes and keeps locks mutexes, each on a path of
     * its own and revocable (so each has a watch on its node), timing each
     * acquire; then times probes more acquires (released at once) while
     * holding them.
     */
    private String benchHeld(String path, long locks, long probes) throws Exception {
        if (locks > 100_000 || probes > 100_000) {
            throw new Usage("at most 100000 locks and probes");
        }
        heldRelease();
        heldPath = path;
        heldSession = client.getZookeeperClient().getZooKeeper().getSessionId();
        long[] build = new long[(int) locks];
        for (int i = 0; i < locks; i++) {
            InterProcessMutex m = new InterProcessMutex(client, path + "/l" + i);
            m.makeRevocable(lock -> { });
            long t0 = System.nanoTime();
            if (!m.acquire(BENCH_ACQUIRE_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("bench held: " + path + "/l" + i + " not acquired within " + BENCH_ACQUIRE_MS + " ms");
            }
            build[i] = (System.nanoTime() - t0) / 1000;
            heldLocks.add(m);
        }
        long[] probe = new long[(int) probes];
        for (int i = 0; i < probes; i++) {
            InterProcessMutex m = new InterProcessMutex(client, path + "/p" + i);
            m.makeRevocable(lock -> { });
            long t0 = System.nanoTime();
            if (!m.acquire(BENCH_ACQUIRE_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("bench held: " + path + "/p" + i + " not acquired within " + BENCH_ACQUIRE_MS + " ms");
            }
            probe[i] = (System.nanoTime() - t0) / 1000;
            m.release();
        }
        Arrays.sort(build);
        Arrays.sort(probe);
        return "OK " + percentile(build, 0.50) + " " + percentile(probe, 0.50) + " " + percentile(probe, 0.99);
    }

    /** How many "bench held" locks this thread still owns, whether the session is the one that took them, and whether the first lock's node is there (a round trip). */
    private String heldCheck() throws Exception {
        if (heldPath == null) {
            throw new Usage("no bench held");
        }
        long owned = heldLocks.stream().filter(InterProcessMutex::isOwnedByCurrentThread).count();
        boolean same = client.getZookeeperClient().getZooKeeper().getSessionId() == heldSession;
        boolean there = heldLocks.isEmpty() || client.getChildren().forPath(heldPath + "/l0").size() == 1;
        return "OK " + owned + " " + (same ? 1 : 0) + " " + (there ? 1 : 0);
    }

    private void heldRelease() {
        for (InterProcessMutex m : heldLocks) {
            try {
                m.release();
            } catch (Exception e) {
                // the next run uses fresh paths
            }
        }
        heldLocks.clear();
        heldPath = null;
    }

    /** Waits (bounded) until path has count children. */
    private void awaitChildren(String path, int count) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(SCALE_ACQUIRE_MS);
        while (true) {
            int n = client.checkExists().forPath(path) == null ? 0 : client.getChildren().forPath(path).size();
            if (n == count) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new Usage("bench giveup: " + path + " has " + n + " children, not " + count);
            }
            Thread.sleep(10);
        }
    }

    private static long median(long[] values) {
        long[] v = values.clone();
        Arrays.sort(v);
        return percentile(v, 0.50);
    }

    /**
     * One holder and waiters waiters on one mutex (threads over sessions
     * sessions); QUITTERS of them, queued in the middle, time out QUIT_GAP_MS
     * apart. Around each give-up the server's counters give the requests
     * (less the mntr reading) and watch events it cost; overrun is how long
     * after its deadline the acquire returned.
     */
    private String benchGiveUp(String path, int sessions, int waiters, String mntrAddr) throws Exception {
        if (waiters < QUITTERS || waiters > MAX_BENCH_THREADS) {
            throw new Usage("waiters must be " + QUITTERS + ".." + MAX_BENCH_THREADS);
        }
        try (Crew crew = new Crew(sessions)) {
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Thread> threads = new ArrayList<>();
            InterProcessMutex holder = new InterProcessMutex(crew.clients.get(0), path);
            if (!holder.acquire(BENCH_ACQUIRE_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("bench giveup: " + path + " not acquired");
            }
            int[] next = {0};
            java.util.function.Consumer<Integer> startWaiters = count -> {
                for (int j = 0; j < count; j++) {
                    InterProcessMutex m = new InterProcessMutex(crew.clients.get(++next[0] % sessions), path);
                    Thread t = new Thread(() -> {
                        try {
                            if (!m.acquire(SCALE_ACQUIRE_MS, TimeUnit.MILLISECONDS)) {
                                throw new IllegalStateException("a waiter timed out");
                            }
                            m.release();
                        } catch (Throwable e) {
                            failure.compareAndSet(null, e);
                        }
                    }, "bench-giveup-waiter");
                    t.setDaemon(true);
                    threads.add(t);
                    t.start();
                }
            };
            int first = (waiters - QUITTERS) / 2;
            startWaiters.accept(first);
            awaitChildren(path, 1 + first);
            long quitAt = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(2000 + 10L * waiters);
            long[] deadlines = new long[QUITTERS];
            long[] returned = new long[QUITTERS];
            CountDownLatch[] gone = new CountDownLatch[QUITTERS];
            for (int k = 0; k < QUITTERS; k++) {
                long deadline = quitAt + TimeUnit.MILLISECONDS.toNanos(k * QUIT_GAP_MS);
                deadlines[k] = deadline;
                gone[k] = new CountDownLatch(1);
                int slot = k;
                InterProcessMutex m = new InterProcessMutex(crew.clients.get(++next[0] % sessions), path);
                Thread t = new Thread(() -> {
                    try {
                        if (m.acquire(deadline - System.nanoTime(), TimeUnit.NANOSECONDS)) {
                            m.release();
                            throw new IllegalStateException("a quitter got the lock");
                        }
                        returned[slot] = System.nanoTime();
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    } finally {
                        gone[slot].countDown();
                    }
                }, "bench-giveup-quitter");
                t.setDaemon(true);
                threads.add(t);
                t.start();
            }
            awaitChildren(path, 1 + first + QUITTERS);
            startWaiters.accept(waiters - first - QUITTERS);
            awaitChildren(path, 1 + waiters);
            if (System.nanoTime() > quitAt - TimeUnit.MILLISECONDS.toNanos(100)) {
                throw new Usage("bench giveup: queueing " + waiters + " waiters took longer than the give-up wait");
            }
            long[] requests = new long[QUITTERS];
            long[] events = new long[QUITTERS];
            long[] overrun = new long[QUITTERS];
            for (int k = 0; k < QUITTERS; k++) {
                sleepUntil(deadlines[k] - TimeUnit.MILLISECONDS.toNanos(50));
                long[] m0 = mntr(mntrAddr);
                if (!gone[k].await(SCALE_ACQUIRE_MS, TimeUnit.MILLISECONDS) || failure.get() != null) {
                    break;
                }
                Thread.sleep(100);
                long[] m1 = mntr(mntrAddr);
                requests[k] = m1[0] - m0[0] - 1;
                events[k] = m1[1] - m0[1];
                overrun[k] = Math.max(0, returned[k] - deadlines[k]) / 1000;
            }
            if (failure.get() == null) {
                awaitChildren(path, 1 + waiters - QUITTERS);
            }
            holder.release();
            long joinDeadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(SCALE_ACQUIRE_MS);
            for (Thread t : threads) {
                TimeUnit.NANOSECONDS.timedJoin(t, Math.max(1, joinDeadline - System.nanoTime()));
                if (t.isAlive()) {
                    failure.compareAndSet(null, new IllegalStateException(t.getName() + " still running"));
                }
            }
            Throwable e = failure.get();
            if (e != null) {
                throw new Usage("bench giveup: " + e.getClass().getName() + ": " + e.getMessage());
            }
            return "OK " + median(requests) + " " + median(events) + " " + median(overrun);
        }
    }

    /** Curator's version from the recipes jar's Maven properties. */
    private static String curatorVersion() {
        String resource = "/META-INF/maven/org.apache.curator/curator-recipes/pom.properties";
        try (InputStream in = InterProcessMutex.class.getResourceAsStream(resource)) {
            if (in == null) {
                return "unknown";
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown");
        } catch (IOException e) {
            return "unknown";
        }
    }

    // ---- queues (org.apache.curator.framework.recipes.queue), UTF-8 string items ----

    /** Producer-only queues by "kind path", built on first use. */
    private final Map<String, Object> queueProducers = new HashMap<>();
    /** Consumer queues by "kind path", and what each consumed, in order. */
    private final Map<String, java.io.Closeable> queueConsumers = new HashMap<>();
    private final Map<String, List<String>> queueTaken = new HashMap<>();

    private static final org.apache.curator.framework.recipes.queue.QueueSerializer<String> QUEUE_STRINGS =
            new org.apache.curator.framework.recipes.queue.QueueSerializer<String>() {
                @Override
                public byte[] serialize(String item) {
                    return item.getBytes(StandardCharsets.UTF_8);
                }

                @Override
                public String deserialize(byte[] bytes) {
                    return new String(bytes, StandardCharsets.UTF_8);
                }
            };

    private String queueCommand(String[] w) throws Exception {
        need(w, 4, 6);
        String kind = w[1];
        String path = w[2];
        String key = kind + " " + path;
        if (kind.equals("bench")) {
            need(w, 5, 5);
            return queueBench(path, (int) parseLong(w[3], "consumers"), (int) parseLong(w[4], "items"));
        }
        if (kind.equals("simple")) {
            need(w, 5, 5);
            org.apache.curator.framework.recipes.queue.SimpleDistributedQueue q =
                    new org.apache.curator.framework.recipes.queue.SimpleDistributedQueue(client, path);
            switch (w[3]) {
                case "offer":
                    q.offer(w[4].getBytes(StandardCharsets.UTF_8));
                    return "OK offered";
                case "poll": {
                    byte[] got = q.poll(parseLong(w[4], "ms"), TimeUnit.MILLISECONDS);
                    return got == null ? "OK none" : "OK item " + new String(got, StandardCharsets.UTF_8);
                }
                default:
                    throw new Usage("unknown simple queue operation: " + w[3]);
            }
        }
        if (!List.of("plain", "priority", "delay", "id").contains(kind)) {
            throw new Usage("unknown queue kind: " + kind);
        }
        switch (w[3]) {
            case "put":
            case "putmulti": {
                need(w, 5, kind.equals("plain") ? 5 : 6);
                Object q = queueProducers.get(key);
                if (q == null) {
                    q = buildQueue(kind, org.apache.curator.framework.recipes.queue.QueueBuilder
                            .builder(client, null, QUEUE_STRINGS, path).putInBackground(false));
                    queueProducers.put(key, q);
                }
                String arg = w.length > 5 ? w[5] : null;
                if (!kind.equals("plain") && arg == null) {
                    throw new Usage(kind + " queue put needs an argument");
                }
                if (w[3].equals("putmulti")) {
                    java.util.Iterator<String> items = Arrays.asList(w[4].split(",")).iterator();
                    org.apache.curator.framework.recipes.queue.MultiItem<String> multi =
                            () -> items.hasNext() ? items.next() : null;
                    switch (kind) {
                        case "plain":
                            ((org.apache.curator.framework.recipes.queue.DistributedQueue<String>) q).putMulti(multi);
                            break;
                        case "priority":
                            ((org.apache.curator.framework.recipes.queue.DistributedPriorityQueue<String>) q)
                                    .putMulti(multi, parseInt(arg, "priority"));
                            break;
                        case "delay":
                            ((org.apache.curator.framework.recipes.queue.DistributedDelayQueue<String>) q)
                                    .putMulti(multi, parseLong(arg, "epoch ms"));
                            break;
                        default:
                            throw new Usage("an id queue has no putMulti");
                    }
                    return "OK put";
                }
                switch (kind) {
                    case "plain":
                        ((org.apache.curator.framework.recipes.queue.DistributedQueue<String>) q).put(w[4]);
                        break;
                    case "priority":
                        ((org.apache.curator.framework.recipes.queue.DistributedPriorityQueue<String>) q)
                                .put(w[4], parseInt(arg, "priority"));
                        break;
                    case "delay":
                        ((org.apache.curator.framework.recipes.queue.DistributedDelayQueue<String>) q)
                                .put(w[4], parseLong(arg, "epoch ms"));
                        break;
                    default:
                        ((org.apache.curator.framework.recipes.queue.DistributedIdQueue<String>) q).put(w[4], arg);
                }
                return "OK put";
            }
            case "remove": {
                need(w, 5, 5);
                if (!kind.equals("id")) {
                    throw new Usage("remove is for id queues");
                }
                Object q = queueProducers.get(key);
                if (q == null) {
                    q = buildQueue(kind, org.apache.curator.framework.recipes.queue.QueueBuilder
                            .builder(client, null, QUEUE_STRINGS, path).putInBackground(false));
                    queueProducers.put(key, q);
                }
                return "OK " + ((org.apache.curator.framework.recipes.queue.DistributedIdQueue<String>) q).remove(w[4]);
            }
            case "consume": {
                need(w, 4, 5);
                if (queueConsumers.containsKey(key)) {
                    throw new Usage("already consuming " + key);
                }
                List<String> taken = java.util.Collections.synchronizedList(new ArrayList<>());
                org.apache.curator.framework.recipes.queue.QueueConsumer<String> consumer =
                        new org.apache.curator.framework.recipes.queue.QueueConsumer<String>() {
                            @Override
                            public void consumeMessage(String message) {
                                taken.add(message);
                            }

                            @Override
                            public void stateChanged(CuratorFramework c,
                                    org.apache.curator.framework.state.ConnectionState s) {
                                // nothing to do
                            }
                        };
                org.apache.curator.framework.recipes.queue.QueueBuilder<String> b =
                        org.apache.curator.framework.recipes.queue.QueueBuilder
                                .builder(client, consumer, QUEUE_STRINGS, path).putInBackground(false);
                if (w.length > 4) {
                    b = b.lockPath(w[4]);
                }
                Object q = buildQueue(kind, b);
                queueConsumers.put(key, (java.io.Closeable) q);
                queueTaken.put(key, taken);
                return "OK started";
            }
            case "taken": {
                need(w, 4, 4);
                List<String> taken = queueTaken.getOrDefault(key, List.of());
                synchronized (taken) {
                    return "OK " + String.join(",", taken);
                }
            }
            case "await": {
                need(w, 6, 6);
                List<String> taken = queueTaken.get(key);
                if (taken == null) {
                    throw new Usage("not consuming " + key);
                }
                int n = parseInt(w[4], "n");
                long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(parseLong(w[5], "ms"));
                while (taken.size() < n && System.nanoTime() < deadline) {
                    Thread.sleep(10);
                }
                return "OK " + (taken.size() >= n);
            }
            case "close": {
                need(w, 4, 4);
                java.io.Closeable q = queueConsumers.remove(key);
                if (q != null) {
                    q.close();
                }
                return "OK closed";
            }
            default:
                throw new Usage("unknown queue operation: " + w[3]);
        }
    }

    /**
     * One producer (the peer's client) puts items one by one on a DistributedQueue, consumer
     * sessions take them: OK items elapsed_us p50_us p99_us, the latency from a put's start
     * to the item's consumer.
     */
    private String queueBench(String path, int consumers, int items) throws Exception {
        if (consumers < 1 || items < 1) {
            throw new Usage("queue bench needs consumers and items of at least 1");
        }
        long[] putAt = new long[items];
        long[] latency = new long[items];
        CountDownLatch taken = new CountDownLatch(items);
        List<CuratorFramework> clients = new ArrayList<>();
        List<org.apache.curator.framework.recipes.queue.DistributedQueue<String>> queues = new ArrayList<>();
        try {
            for (int i = 0; i < consumers; i++) {
                CuratorFramework c = newClient(connectString, sessionMs);
                clients.add(c);
                c.start();
                if (!c.blockUntilConnected((int) BENCH_CONNECT_MS, TimeUnit.MILLISECONDS)) {
                    throw new Usage("queue bench: a consumer did not connect");
                }
                org.apache.curator.framework.recipes.queue.QueueConsumer<String> consumer =
                        new org.apache.curator.framework.recipes.queue.QueueConsumer<String>() {
                            @Override
                            public void consumeMessage(String message) {
                                int i = Integer.parseInt(message);
                                long at;
                                synchronized (putAt) {
                                    at = putAt[i];
                                }
                                latency[i] = (System.nanoTime() - at) / 1000;
                                taken.countDown();
                            }

                            @Override
                            public void stateChanged(CuratorFramework cf,
                                    org.apache.curator.framework.state.ConnectionState s) {
                                // nothing to do
                            }
                        };
                org.apache.curator.framework.recipes.queue.DistributedQueue<String> q =
                        org.apache.curator.framework.recipes.queue.QueueBuilder
                                .builder(c, consumer, QUEUE_STRINGS, path).putInBackground(false).buildQueue();
                q.start();
                queues.add(q);
            }
            org.apache.curator.framework.recipes.queue.DistributedQueue<String> producer =
                    org.apache.curator.framework.recipes.queue.QueueBuilder
                            .builder(client, null, QUEUE_STRINGS, path).putInBackground(false).buildQueue();
            producer.start();
            queues.add(producer);
            long start = System.nanoTime();
            for (int i = 0; i < items; i++) {
                synchronized (putAt) {
                    putAt[i] = System.nanoTime();
                }
                producer.put(Integer.toString(i));
            }
            if (!taken.await(BENCH_JOIN_GRACE_MS, TimeUnit.MILLISECONDS)) {
                throw new Usage("queue bench: " + (items - taken.getCount()) + " of " + items + " items taken");
            }
            long elapsedUs = (System.nanoTime() - start) / 1000;
            long[] sorted;
            synchronized (putAt) {
                sorted = latency.clone();
            }
            Arrays.sort(sorted);
            return "OK " + items + " " + elapsedUs + " " + sorted[(int) ((items - 1) * 0.50)] + " "
                    + sorted[(int) ((items - 1) * 0.99)];
        } finally {
            for (org.apache.curator.framework.recipes.queue.DistributedQueue<String> q : queues) {
                try {
                    q.close();
                } catch (IOException e) {
                    // its client closes below
                }
            }
            for (CuratorFramework c : clients) {
                c.close();
            }
        }
    }

    /** Builds and starts the queue of this kind. */
    private static Object buildQueue(String kind, org.apache.curator.framework.recipes.queue.QueueBuilder<String> b)
            throws Exception {
        switch (kind) {
            case "plain": {
                org.apache.curator.framework.recipes.queue.DistributedQueue<String> q = b.buildQueue();
                q.start();
                return q;
            }
            case "priority": {
                org.apache.curator.framework.recipes.queue.DistributedPriorityQueue<String> q = b.buildPriorityQueue(0);
                q.start();
                return q;
            }
            case "delay": {
                org.apache.curator.framework.recipes.queue.DistributedDelayQueue<String> q = b.buildDelayQueue();
                q.start();
                return q;
            }
            default: {
                org.apache.curator.framework.recipes.queue.DistributedIdQueue<String> q = b.buildIdQueue();
                q.start();
                return q;
            }
        }
    }
}
