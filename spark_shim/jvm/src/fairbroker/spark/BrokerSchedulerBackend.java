package fairbroker.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.SparkContext;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.scheduler.ExecutorDecommissionInfo;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.concurrent.Future;
import scala.concurrent.Future$;

/**
 * A coarse-grained backend whose executors are started by the fairbroker broker: the driver
 * registers its per-executor demand and target, keeps its lease with heartbeats, and forwards
 * Spark's target changes and kill requests. Executors connect back to the driver on their own.
 *
 * <p>HTTP calls never run on Spark's threads: requests go through one ordered worker thread,
 * heartbeats through another. A broker that is down is retried with backoff and only logged.
 *
 * <p>Reclaim: each heartbeat reply lists the tenant's executors the broker is reclaiming
 * ({@code leaving}); each is decommissioned once (Spark 3.1+), so it takes no new tasks,
 * finishes or hands back its running ones and migrates its blocks before the broker kills it.
 */
public class BrokerSchedulerBackend extends CoarseGrainedSchedulerBackend {
  private static final Logger LOG = LoggerFactory.getLogger(BrokerSchedulerBackend.class);
  private static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);
  private static final Duration STOP_TIMEOUT = Duration.ofSeconds(3);
  private static final long MAX_BACKOFF_MS = 30_000;
  private static final long MAX_HEARTBEAT_BACKOFF_MS = 10_000;
  private static final int KILL_ATTEMPTS = 5;
  // A reply's leaving list is read up to this many entries, each id up to this length: the
  // broker's list is repeated every heartbeat, so whatever is cut off now comes again later.
  static final int MAX_LEAVING = 1024;
  static final int MAX_EXECUTOR_ID = 64;

  private final BrokerClient client;
  private final Registration registration;
  private final long configuredHeartbeatMs;
  private volatile long heartbeatMs;
  private final ExecutorService requests = Executors.newSingleThreadExecutor(daemon("requests"));
  private final ScheduledExecutorService heartbeats =
      Executors.newSingleThreadScheduledExecutor(daemon("heartbeat"));
  private final AtomicInteger target = new AtomicInteger();
  private final AtomicLong targetVersion = new AtomicLong();
  private final AtomicBoolean registerQueued = new AtomicBoolean();
  private volatile boolean registered;
  private volatile boolean everRegistered;
  private volatile boolean stopping;
  private final boolean tls; // spark.fairbroker.caFile given: https to the broker
  private int heartbeatFailures;
  // Executors already decommissioned at the broker's request (heartbeat thread only).
  private final Set<String> decommissioned = new HashSet<>();
  private boolean decommissionUnavailable;
  private final boolean decommissionEnabled;

  public BrokerSchedulerBackend(TaskSchedulerImpl scheduler, SparkContext sc, String masterUrl) {
    super(scheduler, sc.env().rpcEnv());
    String token = sc.conf().get("spark.fairbroker.token", System.getenv("FAIRBROKER_TOKEN"));
    // TLS: trust the CA in this PEM file (the broker serves tls_cert); plain HTTP without it
    String caFile =
        sc.conf().get("spark.fairbroker.caFile", System.getenv("FAIRBROKER_CA_FILE"));
    tls = caFile != null;
    client = new BrokerClient(BrokerClient.baseUrls(masterUrl, tls), token, caFile);
    registration = new Registration(sc.conf(), applicationId());
    configuredHeartbeatMs =
        Math.max(100, sc.conf().getTimeAsMs("spark.fairbroker.heartbeatInterval", "2s"));
    heartbeatMs = configuredHeartbeatMs;
    decommissionEnabled = sc.conf().getBoolean("spark.decommission.enabled", false);
    target.set(registration.initialExecutors);
  }

  @Override
  public void start() {
    super.start();
    LOG.info(
        "fairbroker: registering tenant {} with {}: demand cpus={} mem={} MiB, target {}{}",
        registration.tenantId,
        client.baseUrl,
        registration.cores,
        registration.memMib,
        target.get(),
        registration.oblivious ? " (oblivious: demand not declared to the policy)" : "");
    // One synchronous attempt, so that a broker refusing the tenant fails the SparkContext
    // with its reason; an unreachable broker is retried in the background instead.
    try {
      BrokerClient.Reply reply = register();
      if (!reply.ok() && !reply.retryable()) {
        throw new IllegalStateException(
            "fairbroker: " + client.baseUrl + " refused the registration: " + reply.error());
      }
      if (!reply.ok()) {
        LOG.warn("fairbroker: registration failed ({}); retrying", reply.error());
        queueRegister();
      }
    } catch (IOException e) {
      if (!tls && BrokerClient.speaksTls(client.baseUrl)) {
        throw new IllegalStateException(
            "fairbroker: the broker at " + client.baseUrl.substring("http://".length())
                + " serves TLS: set spark.fairbroker.caFile (or FAIRBROKER_CA_FILE) to the CA "
                + "certificate that issued its certificate (plain HTTP got: " + describe(e) + ")");
      }
      LOG.warn("fairbroker: broker {} unreachable ({}); retrying registration in the background",
          client.baseUrl, describe(e));
      queueRegister();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      queueRegister();
    }
    heartbeats.schedule(this::heartbeat, heartbeatMs, TimeUnit.MILLISECONDS);
  }

  @Override
  public Future<Object> doRequestTotalExecutors(
      scala.collection.immutable.Map<ResourceProfile, Object> totals) {
    int total = 0;
    scala.collection.Iterator<Object> counts = totals.valuesIterator();
    while (counts.hasNext()) {
      total += ((Number) counts.next()).intValue();
    }
    final int wanted = total;
    target.set(wanted);
    final long version = targetVersion.incrementAndGet();
    submit(() -> sendTarget(wanted, version));
    return Future$.MODULE$.<Object>successful(Boolean.TRUE);
  }

  @Override
  public Future<Object> doKillExecutors(/*SCALA_SEQ*/scala.collection.immutable.Seq<String> ids) {
    List<String> executorIds = new ArrayList<>();
    scala.collection.Iterator<String> it = ids.iterator();
    while (it.hasNext()) {
      executorIds.add(it.next());
    }
    if (!executorIds.isEmpty()) {
      submit(() -> sendKill(executorIds));
    }
    return Future$.MODULE$.<Object>successful(Boolean.TRUE);
  }

  /**
   * Target 0 first so the broker does not replace executors that exit while Spark stops them;
   * Unregister after Spark has stopped them, so they are not killed under a live driver.
   */
  @Override
  public void stop() {
    stopping = true;
    heartbeats.shutdownNow();
    requests.shutdownNow();
    // A tenant id the broker refused may be another driver's: leave that one alone.
    if (!everRegistered) {
      super.stop();
      return;
    }
    Map<String, Object> zero = new LinkedHashMap<>(tenantRef());
    zero.put("total", 0);
    bestEffort("SetTarget", zero);
    try {
      super.stop();
    } finally {
      bestEffort("Unregister", tenantRef());
    }
  }

  private void bestEffort(String method, Map<String, Object> body) {
    try {
      BrokerClient.Reply reply = client.post(method, body, STOP_TIMEOUT);
      if (!reply.ok() && reply.status != 404) {
        LOG.warn("fairbroker: {} failed: {}", method, reply.error());
      }
    } catch (IOException e) {
      LOG.warn("fairbroker: {} to {} failed ({})", method, client.baseUrl, describe(e));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private BrokerClient.Reply register() throws IOException, InterruptedException {
    BrokerClient.Reply reply =
        client.post("Register", registration.body(target.get()), REQUEST_TIMEOUT);
    if (reply.ok()) {
      registered = true;
      everRegistered = true;
      // Three heartbeats per lease, so one lost or late heartbeat does not cost the lease.
      double lease = reply.body == null ? 0 : reply.body.path("leaseSeconds").asDouble(0);
      if (lease > 0) {
        heartbeatMs = Math.max(100, Math.min(configuredHeartbeatMs, (long) (lease * 1000 / 3)));
      }
      LOG.info("fairbroker: registered with {}: {}", client.baseUrl,
          reply.body == null ? "{}" : reply.body.toString());
    }
    return reply;
  }

  /** Registers again (with the current target) on the ordered thread until it succeeds. */
  private void queueRegister() {
    registered = false;
    if (registerQueued.compareAndSet(false, true)) {
      submit(this::registerUntilDone);
    }
  }

  private void registerUntilDone() throws InterruptedException {
    registerQueued.set(false);
    for (int attempt = 0; !stopping && !registered; attempt++) {
      try {
        BrokerClient.Reply reply = register();
        if (reply.ok()) {
          return;
        }
        LOG.warn("fairbroker: registration failed ({}); retrying", reply.error());
      } catch (IOException e) {
        warnUnreachable("registration", describe(e), attempt);
      }
      Thread.sleep(backoffMs(attempt));
    }
  }

  private void sendTarget(int total, long version) throws InterruptedException {
    Map<String, Object> body = new LinkedHashMap<>(tenantRef());
    body.put("total", total);
    // A newer target supersedes this one; an unregistered tenant gets it with Register.
    for (int attempt = 0; !stopping && registered && version == targetVersion.get(); attempt++) {
      try {
        BrokerClient.Reply reply = client.post("SetTarget", body, REQUEST_TIMEOUT);
        if (reply.ok()) {
          LOG.info("fairbroker: target {} executors", total);
          return;
        }
        if (reply.status == 404) {
          LOG.warn("fairbroker: broker does not know tenant {}; registering again",
              registration.tenantId);
          queueRegister();
          return;
        }
        LOG.warn("fairbroker: SetTarget {} failed: {}", total, reply.error());
        if (!reply.retryable()) {
          return;
        }
      } catch (IOException e) {
        warnUnreachable("SetTarget", describe(e), attempt);
      }
      Thread.sleep(backoffMs(attempt));
    }
  }

  private void sendKill(List<String> executorIds) throws InterruptedException {
    Map<String, Object> body = new LinkedHashMap<>(tenantRef());
    body.put("executorIds", executorIds);
    for (int attempt = 0; !stopping && attempt < KILL_ATTEMPTS; attempt++) {
      try {
        BrokerClient.Reply reply = client.post("KillExecutors", body, REQUEST_TIMEOUT);
        if (reply.ok()) {
          LOG.info("fairbroker: asked to kill executors {}", executorIds);
          return;
        }
        LOG.warn("fairbroker: KillExecutors {} failed: {}", executorIds, reply.error());
        if (!reply.retryable()) {
          return;
        }
      } catch (IOException e) {
        warnUnreachable("KillExecutors", describe(e), attempt);
      }
      Thread.sleep(backoffMs(attempt));
    }
  }

  /** Runs on the heartbeat thread and schedules itself again, with backoff while failing. */
  private void heartbeat() {
    if (stopping) {
      return;
    }
    try {
      if (registered) {
        BrokerClient.Reply reply = client.post("Heartbeat", tenantRef(), REQUEST_TIMEOUT);
        if (reply.retryable()) {
          warnUnreachable("heartbeat", reply.error(), heartbeatFailures++);
        } else {
          if (heartbeatFailures > 0) {
            LOG.info("fairbroker: broker {} reachable again", client.baseUrl);
          }
          heartbeatFailures = 0;
          if (reply.status == 404) {
            LOG.warn("fairbroker: broker does not know tenant {} (lease expired or broker "
                + "restarted); registering again with target {}", registration.tenantId,
                target.get());
            queueRegister();
          } else if (!reply.ok()) {
            LOG.warn("fairbroker: heartbeat refused: {}", reply.error());
          } else {
            leave(reply.body);
          }
        }
      }
    } catch (IOException e) {
      warnUnreachable("heartbeat", describe(e), heartbeatFailures++);
    } catch (InterruptedException e) {
      return;
    } catch (RuntimeException e) {
      LOG.warn("fairbroker: heartbeat failed", e);
    }
    // Backoff is capped lower than for requests: the heartbeat is what notices a restarted
    // broker that lost the tenant, and the tenant's executors wait on re-registration.
    long delay =
        heartbeatFailures == 0
            ? heartbeatMs
            : Math.max(
                heartbeatMs, Math.min(MAX_HEARTBEAT_BACKOFF_MS, backoffMs(heartbeatFailures)));
    if (!stopping) {
      heartbeats.schedule(this::heartbeat, delay, TimeUnit.MILLISECONDS);
    }
  }

  /**
   * Decommissions the executors a heartbeat reply lists as leaving, each once. Ids that are
   * not a live executor of this driver (another application's, already gone, not registered
   * yet) are skipped; one not registered yet is decommissioned by a later heartbeat.
   */
  private void leave(JsonNode reply) {
    if (decommissionUnavailable) {
      return;
    }
    JsonNode leaving = reply == null ? null : reply.get("leaving");
    if (leaving == null || !leaving.isArray()) {
      decommissioned.clear();  // protobuf JSON leaves an empty list out
      return;
    }
    Set<String> listed = new HashSet<>();
    List<String> fresh = new ArrayList<>();
    for (int i = 0; i < leaving.size() && i < MAX_LEAVING; i++) {
      JsonNode item = leaving.get(i);
      if (item == null || !item.isTextual()) {
        continue;
      }
      String id = item.asText();
      if (id.isEmpty() || id.length() > MAX_EXECUTOR_ID || !listed.add(id)) {
        continue;
      }
      if (!decommissioned.contains(id) && isExecutorActive(id)) {
        fresh.add(id);
      }
    }
    decommissioned.retainAll(listed);  // bounded: only ids the broker still lists
    if (fresh.isEmpty()) {
      return;
    }
    if (!decommissionEnabled) {
      LOG.warn("fairbroker: spark.decommission.enabled is false: executors {} take no new "
          + "tasks, but their running tasks are lost when the broker kills them", fresh);
    }
    @SuppressWarnings("unchecked")
    Tuple2<String, ExecutorDecommissionInfo>[] requests = new Tuple2[fresh.size()];
    for (int i = 0; i < fresh.size(); i++) {
      requests[i] = new Tuple2<>(fresh.get(i), new ExecutorDecommissionInfo(
          "reclaimed by the fairbroker broker", scala.Option.<String>empty()));
    }
    try {
      // Spark keeps its target (adjustTargetNumExecutors = false): the tenant still wants
      // the executors, and the broker serves it again when its fair share allows.
      scala.collection.Seq<String> done = decommissionExecutors(requests, false, false);
      List<String> started = new ArrayList<>();
      scala.collection.Iterator<String> it = done.iterator();
      while (it.hasNext()) {
        started.add(it.next());
      }
      decommissioned.addAll(started);
      LOG.info("fairbroker: the broker reclaims executors {}: decommissioning {}", fresh,
          started);
    } catch (LinkageError e) {
      decommissionUnavailable = true;  // Spark before 3.1: the broker's kill is all there is
      LOG.warn("fairbroker: this Spark cannot decommission executors ({}); reclaimed "
          + "executors are killed after the broker's grace", e.toString());
    }
  }

  private Map<String, Object> tenantRef() {
    Map<String, Object> ref = new LinkedHashMap<>();
    ref.put("tenantId", registration.tenantId);
    return ref;
  }

  private interface Call {
    void run() throws InterruptedException;
  }

  private void submit(Call call) {
    if (stopping) {
      return;
    }
    requests.execute(() -> {
      try {
        call.run();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } catch (RuntimeException e) {
        LOG.warn("fairbroker: broker request failed", e);
      }
    });
  }

  /** First failure and then every tenth, so a long broker outage does not flood the log. */
  private void warnUnreachable(String what, String why, int attempt) {
    if (attempt % 10 == 0) {
      LOG.warn("fairbroker: {} to {} failed ({}); retrying with backoff", what, client.baseUrl,
          why);
    }
  }

  private static long backoffMs(int attempt) {
    return Math.min(MAX_BACKOFF_MS, 500L << Math.min(attempt, 6));
  }

  private static String describe(Exception e) {
    return e.getMessage() == null ? e.getClass().getSimpleName()
        : e.getClass().getSimpleName() + ": " + e.getMessage();
  }

  private static ThreadFactory daemon(String name) {
    return runnable -> {
      Thread thread = new Thread(runnable, "fairbroker-" + name);
      thread.setDaemon(true);
      return thread;
    };
  }
}
