package fairbroker.spark;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.apache.spark.launcher.JavaModuleOptions;
import org.apache.spark.network.util.JavaUtils;
import org.apache.spark.rpc.RpcEndpointAddress;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import scala.Tuple2;

/**
 * The RegisterRequest of a driver. The demand vector and the initial target follow
 * allocator/scenarios/spark_demand.py (executor_demand) exactly; tests compare the two.
 */
final class Registration {
  static final int UNBOUNDED = 1_000_000;
  private static final double MIB = 1024.0 * 1024.0;
  private static final Pattern BARE_NUMBER = Pattern.compile("\\d+(\\.\\d+)?");

  final String tenantId;
  final String group;
  final double weight;
  final boolean oblivious;
  final Map<String, String> constraints;
  final int cores;
  final double heapMib;
  final double overheadMib;
  final double memMib;
  final int initialExecutors;
  final Map<String, Object> launch;

  Registration(SparkConf conf, String appId) {
    tenantId = conf.get("spark.fairbroker.tenantId", appId).strip();
    if (tenantId.isEmpty()) {
      throw error("spark.fairbroker.tenantId: must not be empty");
    }
    String g = conf.get("spark.fairbroker.group", "*").strip();
    group = g.isEmpty() ? "*" : g;
    weight = number(conf, "spark.fairbroker.weight", 1);
    if (weight <= 0) {
      throw error("spark.fairbroker.weight: must be positive, got " + weight);
    }
    oblivious = flag(conf, "spark.fairbroker.oblivious");
    constraints = constraints(conf.get("spark.fairbroker.constraints", ""));

    double cpus = number(conf, "spark.executor.cores", 1);
    if (cpus <= 0 || cpus != Math.rint(cpus)) {
      throw error("spark.executor.cores: must be a positive whole number, got " + cpus);
    }
    cores = (int) cpus;
    heapMib = mib(conf, "spark.executor.memory", "1g");
    if (heapMib <= 0) {
      throw error("spark.executor.memory: must be positive");
    }
    if (conf.contains("spark.executor.memoryOverhead")) {
      overheadMib = mib(conf, "spark.executor.memoryOverhead", null);
    } else if (conf.contains("spark.mesos.executor.memoryOverhead")) {
      overheadMib = mib(conf, "spark.mesos.executor.memoryOverhead", null);
    } else {
      double minimum = mib(conf, "spark.executor.minMemoryOverhead", "384m");
      double factor = number(conf, "spark.executor.memoryOverheadFactor", 0.10);
      overheadMib = Math.max(minimum, Math.floor(factor * heapMib));
    }
    double extra = 0;
    if (flag(conf, "spark.memory.offHeap.enabled")) {
      extra += mib(conf, "spark.memory.offHeap.size", "0", true);
    }
    if (conf.contains("spark.executor.pyspark.memory")) {
      extra += mib(conf, "spark.executor.pyspark.memory", null);
    }
    memMib = heapMib + overheadMib + extra;
    initialExecutors = initialExecutors(conf, cpus);
    launch = launch(conf, appId);
  }

  /** The RegisterRequest body (protobuf JSON mapping) asking for {@code target} executors. */
  Map<String, Object> body(int target) {
    Map<String, Object> demand = new LinkedHashMap<>();
    demand.put("cpus", (double) cores);
    demand.put("mem", memMib);
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("tenantId", tenantId);
    body.put("group", group);
    body.put("weight", weight);
    body.put("demand", demand);
    body.put("launch", launch);
    body.put("target", target);
    body.put("constraints", constraints);
    body.put("oblivious", oblivious);
    return body;
  }

  private static int initialExecutors(SparkConf conf, double cores) {
    if (flag(conf, "spark.dynamicAllocation.enabled")) {
      int low = (int) number(conf, "spark.dynamicAllocation.minExecutors", 0);
      int high =
          conf.contains("spark.dynamicAllocation.maxExecutors")
              ? (int) number(conf, "spark.dynamicAllocation.maxExecutors", 0)
              : UNBOUNDED;
      int initial = (int) number(conf, "spark.dynamicAllocation.initialExecutors", low);
      if (conf.contains("spark.executor.instances")) {
        initial = (int) number(conf, "spark.executor.instances", initial);
      }
      if (high < low) {
        throw error("spark.dynamicAllocation.maxExecutors: below minExecutors");
      }
      return Math.min(Math.max(initial, low), high);
    }
    if (conf.contains("spark.executor.instances")) {
      return (int) number(conf, "spark.executor.instances", 0);
    }
    if (conf.contains("spark.cores.max")) {
      return (int) Math.floor(number(conf, "spark.cores.max", 0) / cores);
    }
    return UNBOUNDED;
  }

  private Map<String, Object> launch(SparkConf conf, String appId) {
    String driverUrl =
        RpcEndpointAddress.apply(
                conf.get("spark.driver.host"),
                conf.getInt("spark.driver.port", 0),
                CoarseGrainedSchedulerBackend.ENDPOINT_NAME())
            .toString();
    Map<String, String> env = new LinkedHashMap<>();
    env.put("SPARK_EXECUTOR_OPTS", executorJavaOptions(conf));
    for (Tuple2<String, String> kv : conf.getAllWithPrefix("spark.executorEnv.")) {
      env.put(kv._1(), kv._2());
    }
    String python = conf.get("spark.pyspark.python", System.getenv("PYSPARK_PYTHON"));
    if (python != null && !python.isBlank()) {
      env.put("PYSPARK_PYTHON", python);
    }
    Map<String, Object> launch = new LinkedHashMap<>();
    launch.put("driverUrl", driverUrl);
    launch.put("appId", appId);
    launch.put("cores", cores);
    launch.put("heapMib", (long) Math.floor(heapMib));
    launch.put("resourceProfileId", 0);
    launch.put("environment", env);
    return launch;
  }

  /**
   * What Spark's own backends put in front of the executor's main class. spark-class does not
   * add the Java 17 module flags for CoarseGrainedExecutorBackend in 3.5, so they go here
   * unless the driver already published them in extraJavaOptions.
   */
  private static String executorJavaOptions(SparkConf conf) {
    StringBuilder opts = new StringBuilder();
    for (String key :
        new String[] {"spark.executor.defaultJavaOptions", "spark.executor.extraJavaOptions"}) {
      String value = conf.get(key, "").strip();
      if (!value.isEmpty()) {
        opts.append(opts.length() > 0 ? " " : "").append(value);
      }
    }
    String modules = JavaModuleOptions.defaultModuleOptions();
    if (!opts.toString().contains(modules)) {
      opts.append(opts.length() > 0 ? " " : "").append(modules);
    }
    return opts.toString();
  }

  private static Map<String, String> constraints(String spec) {
    Map<String, String> out = new LinkedHashMap<>();
    for (String part : spec.split(";")) {
      if (part.isBlank()) {
        continue;
      }
      int colon = part.indexOf(':');
      if (colon <= 0 || part.substring(0, colon).isBlank()) {
        throw error(
            "spark.fairbroker.constraints: expected attr:value;attr2:value, got '" + spec + "'");
      }
      out.put(part.substring(0, colon).strip(), part.substring(colon + 1).strip());
    }
    return out;
  }

  /** A size in MiB; a bare number is MiB, anything else is parsed by Spark. */
  private static double mib(SparkConf conf, String key, String fallback) {
    return mib(conf, key, fallback, false);
  }

  /** As above; a bare number is bytes when `bareIsBytes` (Spark's off-heap size). */
  private static double mib(SparkConf conf, String key, String fallback, boolean bareIsBytes) {
    String raw = conf.get(key, fallback).strip();
    if (BARE_NUMBER.matcher(raw).matches()) {
      return Double.parseDouble(raw) / (bareIsBytes ? MIB : 1.0);
    }
    try {
      return JavaUtils.byteStringAsBytes(raw) / MIB;
    } catch (RuntimeException e) {
      throw error(key + ": not a size: '" + raw + "'");
    }
  }

  private static double number(SparkConf conf, String key, double fallback) {
    String raw = conf.get(key, Double.toString(fallback)).strip();
    double value;
    try {
      value = Double.parseDouble(raw);
    } catch (NumberFormatException e) {
      throw error(key + ": not a number: '" + raw + "'");
    }
    if (!Double.isFinite(value) || value < 0) {
      throw error(key + ": must be a finite non-negative number, got '" + raw + "'");
    }
    return value;
  }

  private static boolean flag(SparkConf conf, String key) {
    return conf.get(key, "false").strip().equalsIgnoreCase("true");
  }

  private static IllegalArgumentException error(String message) {
    return new IllegalArgumentException("fairbroker: " + message);
  }
}
