package fairbroker.spark;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.ExternalClusterManager;
import org.apache.spark.scheduler.SchedulerBackend;
import org.apache.spark.scheduler.TaskScheduler;
import org.apache.spark.scheduler.TaskSchedulerImpl;

/**
 * Makes {@code sparkbroker://HOST:PORT} a Spark master URL. SparkContext only asks the
 * ServiceLoader for URLs it does not know, and SparkSubmit accepts any master starting with
 * "spark", so no patched Spark is needed.
 */
public final class BrokerClusterManager implements ExternalClusterManager {
  static final String SCHEME = "sparkbroker://";

  @Override
  public boolean canCreate(String masterURL) {
    return masterURL.startsWith(SCHEME);
  }

  @Override
  public TaskScheduler createTaskScheduler(SparkContext sc, String masterURL) {
    return new TaskSchedulerImpl(sc);
  }

  @Override
  public SchedulerBackend createSchedulerBackend(
      SparkContext sc, String masterURL, TaskScheduler scheduler) {
    return new BrokerSchedulerBackend((TaskSchedulerImpl) scheduler, sc, masterURL);
  }

  @Override
  public void initialize(TaskScheduler scheduler, SchedulerBackend backend) {
    ((TaskSchedulerImpl) scheduler).initialize(backend);
  }
}
