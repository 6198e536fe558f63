package fairbroker.spark;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.concurrent.Future;
import scala.concurrent.Future$;

/**
 * A coarse-grained backend whose executors are started by the fairbroker broker: the driver
 * registers its per-executor demand and target, keeps its lease with heartbeats, and forwards
 * Spark's target changes and kill requests. Executors connect back to the driver on their own.
 *
 * <p>HTTP calls never run on Spark's threads: requests go through one ordered worker thread,
 * heartbeats through another. A broker that is down is retried with backoff and only logged.
 */
public class BrokerSchedulerBackend extends CoarseGrainedSchedulerBackend {
  private static final Logger LOG = LoggerFactory.getLogger(BrokerSchedulerBackend.class);
  private static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);
  private static final Duration STOP_TIMEOUT = Duration.ofSeconds(3);
  private static final long MAX_BACKOFF_MS = 30_000;
  private static final long MAX_HEARTBEAT_BACKOFF_MS = 10_000;
  private static final int KILL_ATTEMPTS = 5;

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
  private int heartbeatFailures;

  public BrokerSchedulerBackend(TaskSchedulerImpl scheduler, SparkContext sc, String masterUrl) {
    super(scheduler, sc.env().rpcEnv());
    String token = sc.conf().get("spark.fairbroker.token", System.getenv("FAIRBROKER_TOKEN"));
    client = new BrokerClient(BrokerClient.baseUrl(masterUrl), token);
    registration = new Registration(sc.conf(), applicationId());
    configuredHeartbeatMs =
        Math.max(100, sc.conf().getTimeAsMs("spark.fairbroker.heartbeatInterval", "2s"));
    heartbeatMs = configuredHeartbeatMs;
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
