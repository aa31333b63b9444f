// WaitTest: signal, waitForSignal, sleepUntil and the WaitService calls against a real sidecar.
package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import dev.stepwell.v1.AwaitRequest;
import dev.stepwell.v1.CreateWaitRequest;
import dev.stepwell.v1.Wait;
import dev.stepwell.v1.WaitStatus;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The waits as a run uses them: a signal before its wait and after it, the first settlement
 * winning, expiry, cancellation, the caller's timeout, durable sleeps, and handles. Runs that wait
 * run on threads of their own; the test learns that they wait by reading the wait (bounded polls),
 * never by sleeping, and bounds every wait generously for a busy machine.
 */
@ExtendWith(Sidecar.Extension.class)
class WaitTest {
  /** How long a test waits for something that should come at once: far more than it needs. */
  private static final long BOUND_S = 60;

  private StepwellClient root;
  private StepwellClient c;
  private ExecutorService runs;

  @BeforeEach
  void open() {
    root = Sidecar.client();
    c = root.withNamespace("java-" + UUID.randomUUID().toString().substring(0, 12));
    runs = Executors.newCachedThreadPool();
  }

  @AfterEach
  void close() throws InterruptedException {
    runs.shutdownNow();
    runs.awaitTermination(BOUND_S, TimeUnit.SECONDS);
    root.close();
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static String text(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }

  /** Runs {@code body} as a run on its own thread. */
  private <T> Future<T> run(Callable<T> body) {
    return runs.submit(body);
  }

  /** Polls until the wait exists (its run has created it and waits), at most {@link #BOUND_S}. */
  private Wait awaitCreated(String turnId, String name) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(BOUND_S);
    while (true) {
      try {
        return c.getWait(turnId, name);
      } catch (WaitNotFoundException e) {
        if (System.nanoTime() > deadline) throw e;
      }
      Thread.sleep(20);
    }
  }

  /** What the future threw, which must be {@code type}. */
  private static <E extends Throwable> E failure(Future<?> f, Class<E> type) throws Exception {
    ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(BOUND_S, TimeUnit.SECONDS));
    assertInstanceOf(type, e.getCause(), "the run failed otherwise");
    return type.cast(e.getCause());
  }

  @Test
  void aSignalBeforeTheWaitIsKeptForIt() {
    assertTrue(c.signal("t", "approve", bytes("yes")));
    assertEquals("yes", text(c.waitForSignal("t", "approve", Duration.ofSeconds(BOUND_S))));
    Wait w = c.getWait("t", "approve");
    assertEquals(WaitStatus.WAIT_STATUS_RESOLVED, w.getStatus());
    assertEquals("yes", w.getPayload().toStringUtf8());
  }

  @Test
  void aSignalWakesARunThatWaits() throws Exception {
    Future<byte[]> waiting = run(() -> c.waitForSignal("t", "approve"));
    assertEquals(WaitStatus.WAIT_STATUS_PENDING, awaitCreated("t", "approve").getStatus());
    assertTrue(c.signal("t", "approve", bytes("yes")));
    assertEquals("yes", text(waiting.get(BOUND_S, TimeUnit.SECONDS)));
  }

  @Test
  void aWaitingRunOutlivesASidecarRestart() throws Exception {
    Sidecar own = Sidecar.own();
    // Retries that run out within milliseconds, long before the sidecar is back: the wait must
    // outlast the restart by asking again, not by the luck of a call's own retries.
    RetryPolicy brief =
        new RetryPolicy(
            2, Duration.ofMillis(1), Duration.ofMillis(1), 1.0, 0.0, Set.of(Status.Code.UNAVAILABLE));
    try (StepwellClient client = own.builder().build();
        StepwellClient other = own.builder().build()) {
      StepwellClient worker = client.withNamespace("restart").withRetry(brief);
      StepwellClient person = other.withNamespace("restart");
      Future<byte[]> waiting = run(() -> worker.waitForSignal("t", "approve"));
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(BOUND_S);
      while (person.listWaits("t", WaitStatus.WAIT_STATUS_PENDING).isEmpty()) {
        assertTrue(System.nanoTime() < deadline, "the run never created its wait");
        Thread.sleep(20);
      }
      own.kill();
      own.startAgain();
      assertTrue(person.withRetry(RetryPolicy.DEFAULT).signal("t", "approve", bytes("yes")));
      assertEquals("yes", text(waiting.get(BOUND_S, TimeUnit.SECONDS)));
    } finally {
      own.close();
    }
  }

  @Test
  void aTurnFullOfWaitsRefusesANewOne() throws Exception {
    Sidecar own = Sidecar.own("--waits-per-turn-max", "2");
    try (StepwellClient client = own.builder().build()) {
      StepwellClient full = client.withNamespace("full");
      full.createWait("t", "a");
      full.signal("t", "b");
      WaitsPerTurnException e =
          assertThrows(WaitsPerTurnException.class, () -> full.createWait("t", "c"));
      assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.code());
      assertEquals("WAITS_PER_TURN", e.reason());
      assertThrows(WaitsPerTurnException.class, () -> full.signal("t", "c"));
      // The turn's own waits are still there, and another turn has room.
      assertEquals(WaitStatus.WAIT_STATUS_PENDING, full.createWait("t", "a").getStatus());
      full.createWait("u", "c");
    } finally {
      own.close();
    }
  }

  @Test
  void aSidecarWhoseAwaitsAreShorterThanThePollIsAskedAgain() throws Exception {
    // The sidecar answers an Await that asks for more than its longest with the wait pending at
    // its longest; the run then asks again, until its own timeout.
    Sidecar own = Sidecar.own("--await-timeout-max-ms", "200");
    try (StepwellClient client = own.builder().build()) {
      StepwellClient c2 = client.withNamespace("short");
      assertThrows(
          WaitTimeoutException.class, () -> c2.waitForSignal("t", "approve", Duration.ofSeconds(2)));
      Future<byte[]> waiting = run(() -> c2.waitForSignal("t", "approve"));
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(BOUND_S);
      while (c2.listWaits("t", WaitStatus.WAIT_STATUS_PENDING).isEmpty()) {
        assertTrue(System.nanoTime() < deadline, "the run never created its wait");
        Thread.sleep(20);
      }
      assertTrue(c2.signal("t", "approve", bytes("yes")));
      assertEquals("yes", text(waiting.get(BOUND_S, TimeUnit.SECONDS)));
    } finally {
      own.close();
    }
  }

  @Test
  void repeatingTheWinningSignalIsFalse() {
    assertTrue(c.signal("t", "approve", bytes("yes")));
    assertFalse(c.signal("t", "approve", bytes("yes")));
    assertTrue(c.signal("t", "empty"));
    assertFalse(c.signal("t", "empty"));
  }

  @Test
  void anotherPayloadIsRefusedWithTheWinner() {
    assertTrue(c.signal("t", "approve", bytes("yes")));
    WaitSettledException e =
        assertThrows(WaitSettledException.class, () -> c.signal("t", "approve", bytes("no")));
    assertEquals(Status.Code.ALREADY_EXISTS, e.code());
    assertEquals("WAIT_SETTLED", e.reason());
    assertEquals(WaitStatus.WAIT_STATUS_RESOLVED, e.getWait().getStatus());
    assertEquals("yes", e.getWait().getPayload().toStringUtf8());
    assertFalse(e.payloadOmitted());
    assertEquals("yes", text(c.waitForSignal("t", "approve", Duration.ofSeconds(BOUND_S))));
  }

  @Test
  void aWinnerTooLargeForTheErrorIsReadInFull() {
    // Far over the 4 KiB of trailers the sidecar allows itself: it leaves the payload out of the
    // error, and the client reads it.
    byte[] big = new byte[64 * 1024];
    Arrays.fill(big, (byte) 'y');
    assertTrue(c.signal("t", "approve", big));
    WaitSettledException e =
        assertThrows(WaitSettledException.class, () -> c.signal("t", "approve", bytes("no")));
    assertFalse(e.payloadOmitted());
    assertArrayEquals(big, e.getWait().getPayload().toByteArray());
    WaitSettledException cancel =
        assertThrows(WaitSettledException.class, () -> c.cancelWait("t", "approve"));
    assertArrayEquals(big, cancel.getWait().getPayload().toByteArray());
  }

  @Test
  void anExpiredWaitThrowsWaitExpired() {
    c.createWait(
        CreateWaitRequest.newBuilder()
            .setTurnId("t")
            .setName("approve")
            .setExpireAt(StepwellClient.timestamp(Instant.now().plusSeconds(1)))
            .build());
    WaitExpiredException e =
        assertThrows(
            WaitExpiredException.class,
            () -> c.waitForSignal("t", "approve", Duration.ofSeconds(BOUND_S)));
    assertEquals(WaitStatus.WAIT_STATUS_EXPIRED, e.getWait().getStatus());
    assertEquals("stepwell:expiry", c.getWait("t", "approve").getSettledBy());
  }

  @Test
  void aCancelWakesARunThatWaitsWithWaitCancelled() throws Exception {
    Future<byte[]> waiting = run(() -> c.waitForSignal("t", "approve"));
    awaitCreated("t", "approve");
    assertTrue(c.cancelWait("t", "approve"));
    WaitCancelledException e = failure(waiting, WaitCancelledException.class);
    assertEquals(WaitStatus.WAIT_STATUS_CANCELLED, e.getWait().getStatus());
    assertFalse(c.cancelWait("t", "approve"));
    WaitSettledException late =
        assertThrows(WaitSettledException.class, () -> c.signal("t", "approve", bytes("yes")));
    assertEquals(WaitStatus.WAIT_STATUS_CANCELLED, late.getWait().getStatus());
  }

  @Test
  void theTimeoutLeavesTheWaitPending() {
    // A client deadline shorter than the timeout: each Await's deadline must cover its own wait.
    StepwellClient hurried = c.withDeadline(Duration.ofSeconds(1));
    WaitTimeoutException e =
        assertThrows(
            WaitTimeoutException.class,
            () -> hurried.waitForSignal("t", "approve", Duration.ofSeconds(3)));
    assertEquals(Status.Code.DEADLINE_EXCEEDED, e.code());
    assertEquals(WaitStatus.WAIT_STATUS_PENDING, e.getWait().getStatus());
    assertEquals(WaitStatus.WAIT_STATUS_PENDING, c.getWait("t", "approve").getStatus());
    assertThrows(
        WaitTimeoutException.class, () -> c.waitForSignal("t", "approve", Duration.ZERO));
    assertTrue(c.signal("t", "approve", bytes("late")));
    assertEquals("late", text(c.waitForSignal("t", "approve", Duration.ZERO)));
  }

  @Test
  void aSleepUntilThePastReturnsAndSoDoesItsResumption() throws Exception {
    run(() -> sleep("t", "nap", Instant.now().minusSeconds(3600))).get(BOUND_S, TimeUnit.SECONDS);
    Wait w = c.getWait("t", "nap");
    assertEquals(WaitStatus.WAIT_STATUS_RESOLVED, w.getStatus());
    assertEquals("stepwell:timer", w.getSettledBy());
    // A run resumed later computes a later time; the first one stands, and has passed.
    run(() -> sleep("t", "nap", Instant.now().plusSeconds(3600))).get(BOUND_S, TimeUnit.SECONDS);
  }

  @Test
  void aSleepUntilAShortTimeAheadWakesOnItsTimer() throws Exception {
    // Whole microseconds, which every store keeps.
    Instant when = Instant.now().plusSeconds(1).truncatedTo(ChronoUnit.MICROS);
    run(() -> sleep("t", "nap", when)).get(BOUND_S, TimeUnit.SECONDS);
    Wait w = c.getWait("t", "nap");
    assertEquals(WaitStatus.WAIT_STATUS_RESOLVED, w.getStatus());
    assertEquals("stepwell:timer", w.getSettledBy());
    assertEquals(when, StepwellClient.instant(w.getResolveAt()));
  }

  @Test
  void aSignalWakesASleepEarlyAndACancelEndsIt() throws Exception {
    Future<Void> sleeping = run(() -> sleep("t", "nap", Instant.now().plusSeconds(3600)));
    awaitCreated("t", "nap");
    assertTrue(c.signal("t", "nap", bytes("wake up")));
    sleeping.get(BOUND_S, TimeUnit.SECONDS);
    assertNotEquals("stepwell:timer", c.getWait("t", "nap").getSettledBy());

    Future<Void> cancelled = run(() -> sleep("t", "nap2", Instant.now().plusSeconds(3600)));
    awaitCreated("t", "nap2");
    assertTrue(c.cancelWait("t", "nap2"));
    failure(cancelled, WaitCancelledException.class);
  }

  private Void sleep(String turnId, String name, Instant when) {
    c.sleepUntil(turnId, name, when);
    return null;
  }

  @Test
  void theHandleOfAnUnnamedWaitIsEnoughToSignalIt() {
    Wait w = c.createWait(CreateWaitRequest.newBuilder().setTurnId("t").build()).getWait();
    assertFalse(w.getName().isEmpty(), "the sidecar names an unnamed wait");
    assertFalse(w.getHandle().isEmpty());
    // Whoever holds the handle needs neither the turn nor the namespace: a client of another
    // namespace, or of none, signals it.
    assertTrue(root.withNamespace("elsewhere").signalHandle(w.getHandle(), bytes("ok")));
    assertFalse(root.signalHandle(w.getHandle(), bytes("ok")));
    assertEquals("ok", text(c.waitForSignal("t", w.getName(), Duration.ofSeconds(BOUND_S))));
  }

  @Test
  void theCallsOneToOne() {
    assertThrows(WaitNotFoundException.class, () -> c.getWait("t", "nope"));
    Wait created = c.createWait("t", "approve");
    assertEquals(WaitStatus.WAIT_STATUS_PENDING, created.getStatus());
    var pending =
        c.await(
                AwaitRequest.newBuilder()
                    .setTurnId("t")
                    .setName("approve")
                    .setTimeout(StepwellClient.duration(Duration.ofMillis(100)))
                    .build())
            .getWait();
    assertEquals(WaitStatus.WAIT_STATUS_PENDING, pending.getStatus());
    c.createWait("t", "other");
    c.signal("t", "other", bytes("x"));
    List<String> names =
        c.listWaits("t", WaitStatus.WAIT_STATUS_PENDING).stream().map(Wait::getName).toList();
    assertEquals(List.of("approve"), names);
    assertEquals(2, c.listWaits("", WaitStatus.WAIT_STATUS_UNSPECIFIED).size());
  }
}
