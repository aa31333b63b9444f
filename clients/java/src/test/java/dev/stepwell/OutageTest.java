// OutageTest: once(), the waits and deadlines against a sidecar of the test's own that is killed,
// started late, or stalled (SIGSTOP) while a call runs.
package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import dev.stepwell.v1.GetResponse;
import dev.stepwell.v1.RecordState;
import dev.stepwell.v1.WaitStatus;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What a call does while its sidecar is gone or stalled. Each test has a sidecar of its own (a
 * free port, a SQLite file), which it kills with SIGKILL and starts again on the same port and
 * file, or stops with SIGSTOP. The tests learn how far a call got by counting its attempts in an
 * interceptor (latches, never sleeps), and make the outcome hinge on attempts, not on timing: an
 * outage outlasts the calls' own retries by construction.
 */
class OutageTest {
  /** How long a test waits for something that should come at once: far more than it needs. */
  private static final long BOUND_S = 120;

  /** Two attempts per call, 50 ms apart at first: a call's own retries end within moments. */
  private static final RetryPolicy TWO =
      new RetryPolicy(
          2, Duration.ofMillis(50), Duration.ofMillis(200), 2.0, 0.2, Set.of(Status.Code.UNAVAILABLE));

  private Sidecar own;
  private ExecutorService runs;

  @BeforeEach
  void open() throws Exception {
    own = Sidecar.own();
    runs = Executors.newCachedThreadPool();
  }

  @AfterEach
  void close() throws InterruptedException {
    runs.shutdownNow();
    runs.awaitTermination(BOUND_S, TimeUnit.SECONDS);
    own.close(); // resumes a stalled sidecar first
  }

  /** Calls {@code onCall} whenever a call of the method whose name ends in {@code suffix} starts. */
  private static ClientInterceptor counting(String suffix, Runnable onCall) {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        if (method.getFullMethodName().endsWith(suffix)) onCall.run();
        return next.newCall(method, options);
      }
    };
  }

  /**
   * Waits until {@code latch} is down, failing at once, with its error, if {@code call} ended
   * first: a call that gave up before its attempts came.
   */
  private static void awaitAttempts(CountDownLatch latch, Future<?> call, String what)
      throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(BOUND_S);
    while (!latch.await(50, TimeUnit.MILLISECONDS)) {
      if (call.isDone()) {
        ExecutionException e = assertThrows(ExecutionException.class, call::get, what);
        fail(what + "; the call failed with " + e.getCause(), e.getCause());
      }
      assertTrue(System.nanoTime() < deadline, what + ": not within " + BOUND_S + " s");
    }
  }

  private static void await(CountDownLatch latch) {
    try {
      assertTrue(latch.await(BOUND_S, TimeUnit.SECONDS), "the test never went on");
    } catch (InterruptedException e) {
      throw new IllegalStateException(e);
    }
  }

  @Test
  void aSidecarRestartInsideOnceDoesNotRunTheEffectAgain() throws Exception {
    // Three Complete attempts: one more than one call's retries make, so the holder must retry
    // Complete itself, on the strength of its lease, to get there.
    CountDownLatch completes = new CountDownLatch(3);
    try (StepwellClient client = own.builder().intercept(counting("/Complete", completes::countDown)).build()) {
      StepwellClient c = client.withNamespace("restart").withRetry(TWO);
      OnceOptions options = OnceOptions.defaults().lease(Duration.ofSeconds(BOUND_S));
      AtomicInteger effects = new AtomicInteger();
      CountDownLatch running = new CountDownLatch(1);
      CountDownLatch killed = new CountDownLatch(1);
      Future<String> first =
          runs.submit(
              () ->
                  c.once("k", String.class, options, ctx -> {
                    effects.incrementAndGet();
                    running.countDown();
                    await(killed); // the effect runs while the sidecar is killed
                    return "charged";
                  }));
      await(running);
      own.kill();
      killed.countDown();
      awaitAttempts(completes, first, "Complete was not retried past the call's own retries");
      own.startAgain();
      assertEquals("charged", first.get(BOUND_S, TimeUnit.SECONDS));
      String second = c.once("k", String.class, options, ctx -> "again, attempt " + ctx.attempt());
      assertEquals("charged", second, "the second once() must return the recorded result");
      assertEquals(1, effects.get(), "the effect ran exactly once");
      GetResponse record = c.get("k");
      assertEquals(RecordState.RECORD_STATE_COMPLETED, record.getState());
      assertEquals(1, record.getAttempt());
    }
  }

  @Test
  void aWaitBegunWhileTheSidecarIsDownWaitsForItToStart() throws Exception {
    own.kill();
    CountDownLatch creates = new CountDownLatch(3);
    try (StepwellClient client = own.builder().intercept(counting("/CreateWait", creates::countDown)).build()) {
      StepwellClient worker = client.withNamespace("late").withRetry(TWO);
      Future<byte[]> waiting =
          runs.submit(() -> worker.waitForSignal("t", "approve", Duration.ofSeconds(4 * BOUND_S)));
      awaitAttempts(creates, waiting, "CreateWait was not asked again past the call's own retries");
      own.startAgain();
      try (StepwellClient person = own.builder().build()) {
        byte[] yes = "yes".getBytes(StandardCharsets.UTF_8);
        assertTrue(person.withNamespace("late").signal("t", "approve", yes));
      }
      assertEquals("yes", new String(waiting.get(BOUND_S, TimeUnit.SECONDS), StandardCharsets.UTF_8));
    }
  }

  @Test
  void aWaitOnAStalledSidecarEndsWithItsTimeoutAsWaitTimeout() throws Exception {
    try (StepwellClient client = own.builder().build()) {
      StepwellClient c = client.withNamespace("stalled");
      assertEquals(WaitStatus.WAIT_STATUS_PENDING, c.createWait("t", "approve").getStatus());
      own.stall();
      // The client's deadline (10 s) is beyond the wait's timeout: the timeout bounds the call.
      WaitTimeoutException e =
          assertThrows(
              WaitTimeoutException.class,
              () -> c.waitForSignal("t", "approve", Duration.ofSeconds(3)));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.code());
      assertEquals("WAIT_PENDING", e.reason());
      assertEquals("approve", e.getWait().getName());
      own.resume();
      assertEquals(WaitStatus.WAIT_STATUS_PENDING, c.getWait("t", "approve").getStatus());
    }
  }

  @Test
  void aDeadlineBoundsTheWholeCallItsRetriesIncluded() throws Exception {
    AtomicInteger restores = new AtomicInteger();
    try (StepwellClient client = own.builder().intercept(counting("/Restore", restores::incrementAndGet)).build()) {
      StepwellClient c = client.withNamespace("stalled");
      assertTrue(c.latest("t").isEmpty()); // connected
      own.stall();
      // A policy that retries DEADLINE_EXCEEDED, at once: per attempt, the deadline would allow
      // five attempts; for the whole call, there is no time left for a second.
      RetryPolicy eager =
          new RetryPolicy(
              5, Duration.ofMillis(1), Duration.ofMillis(1), 1.0, 0.0,
              Set.of(Status.Code.UNAVAILABLE, Status.Code.DEADLINE_EXCEEDED));
      StepwellClient hurried = c.withRetry(eager).withDeadline(Duration.ofMillis(200));
      restores.set(0);
      StepwellException e = assertThrows(StepwellException.class, () -> hurried.latest("t"));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.code());
      assertEquals(1, restores.get(), "attempts after the deadline had passed");
      own.resume();
      assertTrue(c.latest("t").isEmpty());
    }
  }
}
