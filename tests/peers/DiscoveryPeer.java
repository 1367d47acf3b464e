import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.x.discovery.ServiceCache;
import org.apache.curator.x.discovery.ServiceDiscovery;
import org.apache.curator.x.discovery.ServiceDiscoveryBuilder;
import org.apache.curator.x.discovery.ServiceInstance;
import org.apache.curator.x.discovery.ServiceInstanceBuilder;
import org.apache.curator.x.discovery.ServiceType;
import org.apache.curator.x.discovery.UriSpec;
import org.apache.curator.x.discovery.details.JsonInstanceSerializer;
import org.apache.curator.x.discovery.details.ServiceCacheListener;

/**
 * Curator's service discovery (curator-x-discovery 5.4), driven over the
 * same line protocol as CuratorPeer: READY, then one OK/ERR line per
 * command. Commands are documented in tests/src/peers.rs.
 *
 * Instances to register are given as a JSON "spec" of their fields (test
 * input, built into a ServiceInstance with Curator's builder); instances
 * read are described as JSON from their getters, with the payload's Java
 * class, so the Rust side checks every field as Java sees it.
 */
public class DiscoveryPeer {
    /** A payload class, as a Java service would have. */
    public static class Details {
        private String region;
        private int weight;

        public Details() {
        }

        public String getRegion() {
            return region;
        }

        public void setRegion(String region) {
            this.region = region;
        }

        public int getWeight() {
            return weight;
        }

        public void setWeight(int weight) {
            this.weight = weight;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Details && java.util.Objects.equals(region, ((Details) o).region)
                    && weight == ((Details) o).weight;
        }

        @Override
        public int hashCode() {
            return java.util.Objects.hash(region, weight);
        }
    }

    private final CuratorFramework client;
    private final PrintStream out;
    private final ObjectMapper mapper = new ObjectMapper();
    private final Map<String, ServiceDiscovery<Object>> discoveries = new HashMap<>();
    private final Map<String, ServiceInstance<Object>> registered = new HashMap<>();
    private final Map<String, ServiceCache<Object>> caches = new HashMap<>();
    private final Map<String, AtomicInteger> cacheChanges = new HashMap<>();

    private DiscoveryPeer(CuratorFramework client, PrintStream out) {
        this.client = client;
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        PrintStream proto = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        if (args.length != 1) {
            System.err.println("usage: DiscoveryPeer <connectString>");
            System.exit(2);
        }
        int sessionMs = envInt("PEER_SESSION_MS", 10_000);
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.min(sessionMs, 15_000))
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.err.println("DiscoveryPeer: not connected to " + args[0]);
            System.exit(3);
        }
        watchParent();
        DiscoveryPeer peer = new DiscoveryPeer(client, proto);
        peer.say("READY");
        peer.run();
    }

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
                    Runtime.getRuntime().halt(4);
                }
            }
        }, "parent-watchdog");
        t.setDaemon(true);
        t.start();
    }

    private static int envInt(String name, int dflt) {
        String v = System.getenv(name);
        return (v == null || v.isBlank()) ? dflt : Integer.parseInt(v.trim());
    }

    private void say(String line) {
        out.println(line);
        out.flush();
    }

    private void run() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String reply;
            try {
                reply = handle(line.trim());
            } catch (Throwable e) {
                e.printStackTrace();
                reply = "ERR " + (e.getClass().getSimpleName() + ": " + e.getMessage()).replace('\n', ' ');
            }
            say(reply);
            if (reply.equals("OK bye")) {
                break;
            }
        }
        for (ServiceCache<Object> c : caches.values()) {
            c.close();
        }
        for (ServiceDiscovery<Object> d : discoveries.values()) {
            d.close();
        }
        client.close();
        System.exit(0);
    }

    /** Splits off the first `n` words; the last element is the rest of the line. */
    private static String[] words(String line, int n) {
        String[] w = line.split(" ", n + 1);
        if (w.length < n) {
            throw new IllegalArgumentException("expected at least " + n + " words: " + line);
        }
        return w;
    }

    private String handle(String line) throws Exception {
        String[] w = line.split(" ");
        switch (w[0]) {
            case "ping":
                return "OK pong";
            case "quit":
                return "OK bye";
            case "disc":
                return disc(line);
            default:
                return "ERR unknown command " + w[0];
        }
    }

    private ServiceDiscovery<Object> discovery(String base) {
        ServiceDiscovery<Object> d = discoveries.get(base);
        if (d == null) {
            throw new IllegalStateException("no discovery open on " + base);
        }
        return d;
    }

    private String disc(String line) throws Exception {
        String[] w = line.split(" ");
        String op = w[1];
        String base = w[2];
        switch (op) {
            case "open": {
                // disc open <base> <compatible>
                boolean compatible = Boolean.parseBoolean(w[3]);
                ServiceDiscovery<Object> d = ServiceDiscoveryBuilder.builder(Object.class)
                        .client(client)
                        .basePath(base)
                        .serializer(new JsonInstanceSerializer<>(Object.class, compatible))
                        .build();
                d.start();
                discoveries.put(base, d);
                return "OK opened";
            }
            case "register":
            case "update": {
                // disc register|update <base> <spec json>
                String spec = words(line, 3)[3];
                ServiceInstance<Object> instance = fromSpec(spec);
                if (op.equals("register")) {
                    discovery(base).registerService(instance);
                } else {
                    discovery(base).updateService(instance);
                }
                registered.put(base + "\0" + instance.getId(), instance);
                return "OK " + instance.getId();
            }
            case "unregister": {
                // disc unregister <base> <id>
                ServiceInstance<Object> instance = registered.remove(base + "\0" + w[3]);
                if (instance == null) {
                    return "ERR not registered here: " + w[3];
                }
                discovery(base).unregisterService(instance);
                return "OK unregistered";
            }
            case "names":
                return "OK " + String.join(",", new java.util.TreeSet<>(discovery(base).queryForNames()));
            case "query": {
                // disc query <base> <name>: every instance, described, sorted by id
                TreeMap<String, Object> byId = new TreeMap<>();
                for (ServiceInstance<Object> i : discovery(base).queryForInstances(w[3])) {
                    byId.put(i.getId(), describe(i));
                }
                return "OK " + mapper.writeValueAsString(new ArrayList<>(byId.values()));
            }
            case "get": {
                ServiceInstance<Object> i = discovery(base).queryForInstance(w[3], w[4]);
                return "OK " + mapper.writeValueAsString(i == null ? null : describe(i));
            }
            case "cache": {
                // disc cache <base> <name> start|ids|changes|close
                String key = base + "\0" + w[3];
                switch (w[4]) {
                    case "start": {
                        ServiceCache<Object> c = discovery(base).serviceCacheBuilder().name(w[3]).build();
                        AtomicInteger changes = new AtomicInteger();
                        c.addListener(new ServiceCacheListener() {
                            @Override
                            public void cacheChanged() {
                                changes.incrementAndGet();
                            }

                            @Override
                            public void stateChanged(CuratorFramework c, ConnectionState s) {
                            }
                        });
                        c.start();
                        caches.put(key, c);
                        cacheChanges.put(key, changes);
                        return "OK started";
                    }
                    case "ids": {
                        java.util.TreeSet<String> ids = new java.util.TreeSet<>();
                        for (ServiceInstance<Object> i : caches.get(key).getInstances()) {
                            ids.add(i.getId());
                        }
                        return "OK " + String.join(",", ids);
                    }
                    case "changes":
                        return "OK " + cacheChanges.get(key).get();
                    case "close":
                        caches.remove(key).close();
                        return "OK closed";
                    default:
                        return "ERR unknown cache op " + w[4];
                }
            }
            case "close":
                discoveries.remove(base).close();
                return "OK closed";
            default:
                return "ERR unknown disc op " + op;
        }
    }

    /** An instance from a spec of its fields; the payload by its `payloadKind`. */
    @SuppressWarnings("unchecked")
    private ServiceInstance<Object> fromSpec(String json) throws Exception {
        Map<String, Object> s = mapper.readValue(json, Map.class);
        ServiceInstanceBuilder<Object> b = ServiceInstance.builder();
        b.name((String) s.get("name"));
        if (s.containsKey("id")) {
            b.id((String) s.get("id"));
        }
        b.address((String) s.get("address"));
        if (s.get("port") != null) {
            b.port(((Number) s.get("port")).intValue());
        }
        if (s.get("sslPort") != null) {
            b.sslPort(((Number) s.get("sslPort")).intValue());
        }
        if (s.get("registrationTimeUTC") != null) {
            b.registrationTimeUTC(((Number) s.get("registrationTimeUTC")).longValue());
        }
        if (s.get("serviceType") != null) {
            b.serviceType(ServiceType.valueOf((String) s.get("serviceType")));
        }
        if (s.get("uriSpec") != null) {
            b.uriSpec(new UriSpec((String) s.get("uriSpec")));
        }
        if (s.get("enabled") != null) {
            b.enabled((Boolean) s.get("enabled"));
        }
        Object payload = s.get("payload");
        String kind = (String) s.getOrDefault("payloadKind", "none");
        switch (kind) {
            case "none":
                break;
            case "string":
                b.payload((String) payload);
                break;
            case "long":
                b.payload(((Number) payload).longValue());
                break;
            case "details":
                b.payload(mapper.convertValue(payload, Details.class));
                break;
            case "map":
                b.payload(new HashMap<>((Map<String, Object>) payload));
                break;
            case "list":
                b.payload(new ArrayList<>((List<Object>) payload));
                break;
            default:
                throw new IllegalArgumentException("payloadKind " + kind);
        }
        return b.build();
    }

    /** Every field as Java's getters give it; the uri spec as its parts. */
    private Map<String, Object> describe(ServiceInstance<Object> i) {
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("name", i.getName());
        d.put("id", i.getId());
        d.put("address", i.getAddress());
        d.put("port", i.getPort());
        d.put("sslPort", i.getSslPort());
        d.put("registrationTimeUTC", i.getRegistrationTimeUTC());
        d.put("serviceType", i.getServiceType() == null ? null : i.getServiceType().name());
        List<Object> parts = null;
        if (i.getUriSpec() != null) {
            parts = new ArrayList<>();
            for (UriSpec.Part p : i.getUriSpec().getParts()) {
                parts.add(List.of(p.getValue(), p.isVariable()));
            }
        }
        d.put("uriParts", parts);
        d.put("uri", i.buildUriSpec());
        d.put("enabled", i.isEnabled());
        Object p = i.getPayload();
        d.put("payloadClass", p == null ? null : p.getClass().getName());
        d.put("payload", p == null ? null : mapper.convertValue(p, Object.class));
        return d;
    }
}
